package server

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// RateLimit is how many API requests one API key may make per period. Zero is no limit.
type RateLimit struct {
	Requests int
	Per      time.Duration
}

// ParseRateLimit reads "120/60s" (requests per Go duration); "" and "off" mean no limit.
func ParseRateLimit(s string) (RateLimit, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "off" || s == "0" {
		return RateLimit{}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	count, err := strconv.Atoi(n)
	d, derr := time.ParseDuration(per)
	if !ok || err != nil || derr != nil || count < 1 || d <= 0 {
		return RateLimit{}, fmt.Errorf("rate limit %q: want REQUESTS/DURATION, like 120/60s", s)
	}
	return RateLimit{Requests: count, Per: d}, nil
}

// limiter is a token bucket per API key: each key may burst to Requests and refills at
// Requests/Per. Buckets live in this process: with several replicas each enforces its own.
type limiter struct {
	limit   RateLimit
	rate    float64 // tokens per second
	mu      sync.Mutex
	buckets map[string]*bucket
	calls   int
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(l RateLimit) *limiter {
	if l.Requests <= 0 {
		return nil
	}
	return &limiter{limit: l, rate: float64(l.Requests) / l.Per.Seconds(), buckets: map[string]*bucket{}}
}

// allow takes a token from the key's bucket; when there is none it says how long until one.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls%4096 == 0 {
		l.sweep(now)
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: float64(l.limit.Requests), last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(float64(l.limit.Requests), b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// sweep forgets buckets that have refilled completely: they are the same as new ones.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.last) >= l.limit.Per {
			delete(l.buckets, k)
		}
	}
}

func rateLimited(retry time.Duration) *ep.Error {
	return &ep.Error{Status: http.StatusTooManyRequests, Code: ep.CodeRateLimited,
		Msg: fmt.Sprintf("Too many requests with this API key; retry in %d s.", retrySeconds(retry))}
}

func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
