package enforce

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The rate-limit action: a request's bucket is the values of the bucket_key expressions (the
// client's address, a header, …, one bucket per combination); at most capacity requests of a
// bucket reach the upstream in any window of rate, and the others are answered 429 Too Many
// Requests with a Retry-After header giving the seconds until the bucket admits one again.
// ngrok documents no ERR_NGROK code for this answer (its example is a bare 429 with
// retry-after), so none is sent. With enforce: false the limit is evaluated and every request
// goes on.
//
// A bucket key that fails to evaluate (a header the request lacks, in req.headers['x-api-key'])
// counts as empty: such requests share the bucket of requests without it, rather than the
// route failing. As with ngrok, each edgeplane process counts on its own.
func init() {
	registerRequestAction("rate-limit", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.RateLimitConfig)
		window, err := c.Window()
		if err != nil {
			return nil, fmt.Errorf("%s.config.rate: %v", a.Path, err)
		}
		var keys []*trafficpolicy.Template
		for i, k := range c.BucketKey {
			t, err := trafficpolicy.CompileValue(a.Phase, k)
			if err != nil {
				return nil, fmt.Errorf("%s.config.bucket_key[%d]: %v", a.Path, i, err)
			}
			keys = append(keys, t)
		}
		newLimiter := func() *RateLimiter { return NewRateLimiter(c.Capacity, window) }
		var l *RateLimiter
		if tp.opts.Limiter != nil {
			cfgJSON, _ := json.Marshal(c)
			l = tp.opts.Limiter(a.Path+" "+string(cfgJSON), newLimiter)
		} else {
			l = newLimiter()
		}
		enforced, results := c.Enforced(), tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			parts := make([]string, len(keys))
			for i, k := range keys {
				if v, err := k.Render(vars()); err == nil {
					parts[i] = v
				}
			}
			ok, retry := l.Take(parts)
			if results {
				trafficpolicy.SetResult(vars(), "rate_limit", map[string]any{"bucket_key": strings.Join(parts, ","), "limited": !ok})
			}
			if ok || !enforced {
				return r
			}
			secs := int64(math.Ceil(retry.Seconds()))
			w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, "Too Many Requests: this endpoint's traffic policy limits the rate of requests; retry after %d seconds.\n", max(secs, 1))
			return nil
		}, nil
	})
}

// MaxRateLimitBuckets bounds the buckets one rate limiter keeps. Past it, the least recently
// used bucket is forgotten (its client starts afresh), so a client making up keys (addresses,
// header values) costs bounded memory.
const MaxRateLimitBuckets = 10_000

// RateLimiter is the state of one rate-limit action: a sliding window of the given length per
// bucket, admitting up to capacity requests in any window. Each bucket keeps the count of the
// current fixed window and of the one before, and weighs the one before by how much of it the
// sliding window still covers (the sliding window counter): exact within a bucket's first
// window, and an estimate that never admits more than capacity in the window after. Buckets
// idle for two windows hold nothing and are dropped as new requests come.
type RateLimiter struct {
	capacity   int64
	window     time.Duration
	maxBuckets int
	now        func() time.Time

	mu      sync.Mutex
	buckets map[bucketID]*list.Element
	lru     list.List // of *rateBucket, most recently used first
}

// bucketID is the SHA-256 of a bucket's key parts: fixed in size however long the values a
// client sends.
type bucketID [sha256.Size]byte

type rateBucket struct {
	id        bucketID
	start     time.Time // of the current fixed window
	prev, cur int64     // admitted requests in the window before and in the current one
	last      time.Time
}

// NewRateLimiter makes a limiter admitting capacity requests per bucket in any window.
func NewRateLimiter(capacity int64, window time.Duration) *RateLimiter {
	return &RateLimiter{capacity: capacity, window: window, maxBuckets: MaxRateLimitBuckets, now: time.Now,
		buckets: map[bucketID]*list.Element{}}
}

// Buckets is how many buckets the limiter holds.
func (l *RateLimiter) Buckets() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// Take counts a request of the bucket of key's parts. It reports whether the request is within
// the limit (and counted), or how long until the bucket would admit one.
func (l *RateLimiter) Take(key []string) (bool, time.Duration) {
	id := keyID(key)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropIdle(now)
	var b *rateBucket
	if e, ok := l.buckets[id]; ok {
		l.lru.MoveToFront(e)
		b = e.Value.(*rateBucket)
	} else {
		for len(l.buckets) >= l.maxBuckets {
			l.remove(l.lru.Back())
		}
		b = &rateBucket{id: id, start: now}
		l.buckets[id] = l.lru.PushFront(b)
	}
	b.last = now
	if n := now.Sub(b.start) / l.window; n > 0 {
		if n == 1 {
			b.prev = b.cur
		} else {
			b.prev = 0
		}
		b.cur = 0
		b.start = b.start.Add(n * l.window)
	}
	elapsed := now.Sub(b.start)
	w := float64(l.window)
	estimate := float64(b.prev)*(w-float64(elapsed))/w + float64(b.cur)
	if estimate < float64(l.capacity) {
		b.cur++
		return true, 0
	}
	// Without further requests, the estimate falls below capacity once the window before
	// weighs little enough: in this window while cur < capacity, else in the next one (where
	// cur becomes the window before).
	var wait float64
	if b.cur < l.capacity {
		wait = w*(1-float64(l.capacity-b.cur)/float64(b.prev)) - float64(elapsed)
	} else {
		wait = w - float64(elapsed) + w*(1-float64(l.capacity)/float64(b.cur))
	}
	return false, time.Duration(wait) + time.Nanosecond
}

// dropIdle forgets the least recently used buckets while they have been idle for two windows
// (their counts no longer weigh anything).
func (l *RateLimiter) dropIdle(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		if now.Sub(e.Value.(*rateBucket).last) < 2*l.window {
			return
		}
		l.remove(e)
	}
}

func (l *RateLimiter) remove(e *list.Element) {
	delete(l.buckets, e.Value.(*rateBucket).id)
	l.lru.Remove(e)
}

// keyID hashes key's parts, each prefixed with its length so that no two lists collide.
func keyID(key []string) bucketID {
	h := sha256.New()
	var n [8]byte
	for _, p := range key {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var id bucketID
	h.Sum(id[:0])
	return id
}
