package enforce

import (
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// Bounds of the log action, per account: a traffic policy runs on every request its tenant's
// clients (or anyone) send, so without them one account's policy could fill the operator's log
// and drown every other account's records.
const (
	// PolicyLogRate is how many records per second an account's policies may write, on
	// average; PolicyLogBurst how many at once after a quiet spell.
	PolicyLogRate  = 20
	PolicyLogBurst = 100
	// MaxPolicyLogMetadata bounds one record's metadata, as JSON: a larger one is written as the
	// first MaxPolicyLogMetadata bytes of its JSON, marked truncated.
	MaxPolicyLogMetadata = 4 << 10
	// maxLogAccounts bounds the accounts whose buckets are kept; past it the idlest are
	// forgotten (they start again with a full burst).
	maxLogAccounts = 10_000
)

// PolicyLog is where the log action's records go: the server's structured log, one record per
// action run, naming the account, the endpoint (its URL and id, or the edge's route) and the
// phase, with the metadata the policy gave. Each account has a token bucket of PolicyLogRate
// records per second up to PolicyLogBurst; a record over it is dropped and counted, and the
// account's next admitted record is preceded by one naming how many were dropped. The counts of
// written and dropped records are the data plane's metrics (Counts). One PolicyLog serves the
// whole data plane, routes and agent binds alike.
type PolicyLog struct {
	log  *slog.Logger
	now  func() time.Time
	rate float64
	max  float64

	mu       sync.Mutex
	accounts map[string]*logBucket

	written, dropped atomic.Uint64
}

// logBucket is an account's token bucket, and the records dropped since its last one written.
type logBucket struct {
	tokens  float64
	last    time.Time
	dropped uint64
}

// NewPolicyLog makes the data plane's policy log, writing to log.
func NewPolicyLog(log *slog.Logger) *PolicyLog {
	return &PolicyLog{log: log, now: time.Now, rate: PolicyLogRate, max: PolicyLogBurst, accounts: map[string]*logBucket{}}
}

// Counts returns how many records were written and dropped since the log was made.
func (l *PolicyLog) Counts() (written, dropped uint64) { return l.written.Load(), l.dropped.Load() }

// Record writes one run of a log action of ep's policy, unless its account is over its bound.
func (l *PolicyLog) Record(ep *trafficpolicy.Endpoint, phase, path string, metadata map[string]any) {
	account := ""
	if ep != nil {
		account = ep.Account
	}
	ok, dropped := l.take(account)
	if !ok {
		l.dropped.Add(1)
		return
	}
	l.written.Add(1)
	who := []any{slog.String("account", account)}
	if ep != nil {
		if ep.Route != "" {
			who = append(who, slog.String("edge", ep.ID), slog.String("route", ep.Route))
		} else {
			who = append(who, slog.String("endpoint", ep.ID))
		}
		who = append(who, slog.String("url", ep.URL))
	}
	if dropped > 0 {
		l.log.Warn("traffic policy log records dropped", append(who, slog.Uint64("dropped", dropped),
			slog.String("why", "the account's policies wrote more than its bound of log records"))...)
	}
	attrs := append(who, slog.String("phase", phase), slog.String("action", path))
	if b, err := json.Marshal(metadata); err != nil || len(b) > MaxPolicyLogMetadata {
		s := string(b)
		if len(s) > MaxPolicyLogMetadata {
			s = s[:MaxPolicyLogMetadata]
		}
		attrs = append(attrs, slog.String("metadata", s), slog.Bool("truncated", true))
	} else {
		attrs = append(attrs, slog.Any("metadata", metadata))
	}
	l.log.Info("traffic policy log", attrs...)
}

// take takes a token of account's bucket; it reports whether there was one, and the records
// dropped before it.
func (l *PolicyLog) take(account string) (bool, uint64) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.accounts[account]
	if b == nil {
		if len(l.accounts) >= maxLogAccounts {
			l.forgetIdle(now)
		}
		b = &logBucket{tokens: l.max, last: now}
		l.accounts[account] = b
	}
	b.tokens = min(l.max, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		return false, 0
	}
	b.tokens--
	dropped := b.dropped
	b.dropped = 0
	return true, dropped
}

// forgetIdle drops the buckets that have refilled (idle long enough to hold a full burst), and
// when none has, every bucket: a new account must not wait behind ten thousand others.
func (l *PolicyLog) forgetIdle(now time.Time) {
	full := time.Duration(l.max / l.rate * float64(time.Second))
	for k, b := range l.accounts {
		if now.Sub(b.last) >= full && b.dropped == 0 {
			delete(l.accounts, k)
		}
	}
	if len(l.accounts) >= maxLogAccounts {
		clear(l.accounts)
	}
}
