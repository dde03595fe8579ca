package enforce

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Circuit breaker defaults for values left 0, the same as the API's.
const (
	DefaultBreakerTripped   = 10 * time.Second
	DefaultBreakerWindow    = 10 * time.Second
	DefaultBreakerBuckets   = 10
	DefaultBreakerVolume    = 20
	DefaultBreakerThreshold = 0.5
	maxBreakerBuckets       = 128
)

// BreakerConfig is the circuit_breaker module's configuration. Zero values take the defaults.
type BreakerConfig struct {
	// Tripped is how long the breaker refuses every request once it trips.
	Tripped time.Duration
	// Window is the rolling window the requests are counted over, in Buckets buckets.
	Window  time.Duration
	Buckets int
	// Volume is how many requests the window must hold before the breaker may trip.
	Volume int
	// Threshold is the share of failed requests (5xx answers, connection failures) that trips
	// the breaker, from 0 to 1.
	Threshold float64
}

// Breaker is the circuit_breaker module: it counts the requests it lets through and their
// failures (an answer of 500 or more, which includes edgeplane's own 502 for a backend it could
// not reach, or a handler that never finished) in a rolling window of buckets. Once the window
// holds at least Volume requests and the failed share reaches Threshold, the breaker trips:
// every request gets 503 ERR_NGROK_3202 for Tripped. Then exactly one request, the probe, is let
// through (the others are still refused while it runs): its success closes the breaker with an
// empty window, its failure trips it again.
type Breaker struct {
	cfg   BreakerConfig
	width time.Duration // of one bucket
	now   func() time.Time

	mu        sync.Mutex
	ring      []breakerBucket
	open      bool
	openUntil time.Time
	probing   bool
}

// breakerBucket counts the requests of one bucket-wide slice of time, numbered from the epoch.
type breakerBucket struct {
	slot            int64
	total, failures int
}

// NewBreaker builds the stage, taking the defaults for values left 0; it refuses a threshold
// outside 0..1 or more than 128 buckets (the API's limits).
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	if cfg.Tripped <= 0 {
		cfg.Tripped = DefaultBreakerTripped
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultBreakerWindow
	}
	if cfg.Buckets <= 0 {
		cfg.Buckets = DefaultBreakerBuckets
	}
	if cfg.Volume <= 0 {
		cfg.Volume = DefaultBreakerVolume
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultBreakerThreshold
	}
	if cfg.Threshold < 0 || cfg.Threshold > 1 {
		return nil, errors.New("the error threshold must be a fraction from 0 to 1.0, got " + strconv.FormatFloat(cfg.Threshold, 'g', -1, 64))
	}
	if cfg.Buckets > maxBreakerBuckets {
		return nil, errors.New("the number of buckets must be from 1 to 128, got " + strconv.Itoa(cfg.Buckets))
	}
	return newBreaker(cfg), nil
}

// newBreaker builds a breaker of a complete configuration, taken as given (a traffic policy's
// circuit-breaker may ask for a threshold of 0, which trips on volume alone).
func newBreaker(cfg BreakerConfig) *Breaker {
	width := cfg.Window / time.Duration(cfg.Buckets)
	if width <= 0 {
		width = 1
	}
	return &Breaker{cfg: cfg, width: width, now: time.Now, ring: make([]breakerBucket, cfg.Buckets)}
}

// Config returns the configuration in force, defaults filled in.
func (b *Breaker) Config() BreakerConfig { return b.cfg }

// Name is the module's name.
func (b *Breaker) Name() string { return "circuit_breaker" }

// Wrap refuses requests while the breaker is open and counts the answers of the others.
func (b *Breaker) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admitted, probe := b.admit()
		if !admitted {
			ErrorPage(w, r, http.StatusServiceUnavailable, 3202, "The circuit breaker of this endpoint is open: its upstream failed too often, so requests are refused for a while to let it recover.")
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		finished := false
		defer func() {
			// A handler that panicked (an aborted proxy) counts as a failure.
			b.record(!finished || rec.status >= 500, probe)
		}()
		next.ServeHTTP(rec, r)
		finished = true
	})
}

// admit decides on one request: closed admits; open refuses until Tripped has passed, then
// admits one probe at a time.
func (b *Breaker) admit() (admitted, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false, false
	}
	b.probing = true
	return true, true
}

// record counts the outcome of an admitted request and trips the breaker when the window says
// so; a probe's outcome closes or reopens it instead.
func (b *Breaker) record(failed, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if probe {
		b.probing = false
		if failed {
			b.openUntil = now.Add(b.cfg.Tripped)
			return
		}
		b.open = false
		clear(b.ring)
		return
	}
	if b.open {
		return // admitted before the breaker tripped: the window that tripped it is gone
	}
	slot := now.UnixNano() / int64(b.width)
	bk := &b.ring[int(slot%int64(len(b.ring)))]
	if bk.slot != slot {
		*bk = breakerBucket{slot: slot}
	}
	bk.total++
	if failed {
		bk.failures++
	}
	total, failures := b.window(slot)
	if total >= b.cfg.Volume && float64(failures) >= b.cfg.Threshold*float64(total) {
		b.open = true
		b.openUntil = now.Add(b.cfg.Tripped)
		clear(b.ring)
	}
}

// window sums the buckets of the rolling window ending with slot.
func (b *Breaker) window(slot int64) (total, failures int) {
	oldest := slot - int64(len(b.ring)) + 1
	for _, bk := range b.ring {
		if bk.slot >= oldest && bk.slot <= slot {
			total += bk.total
			failures += bk.failures
		}
	}
	return total, failures
}

// statusRecorder notes the status a handler answers with (200 when it writes none, as
// net/http does); Unwrap lets http.ResponseController reach flushing and hijacking.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Flush passes a flush on, for writers that look for http.Flusher rather than Unwrap.
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap returns the writer underneath.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
