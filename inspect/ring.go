package inspect

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
)

// Defaults of Config: of the order of a thousand entries per account, and byte bounds that keep
// a flood of large headers or bodies from growing the process.
const (
	DefaultEntries      = 1000
	DefaultAccountBytes = 4 << 20
	DefaultTotalBytes   = 32 << 20
	// MinAccountBytes is the least per-account bound Config accepts: room for the largest
	// entry (64 KiB of headers each way, two bodies) several times over.
	MinAccountBytes = 1 << 20
	// maxSubscribers bounds the live views of one account (console tabs following its traffic).
	maxSubscribers = 16
	// subscriptionBuffer is how many entries a live view may fall behind before it is told it
	// lost some.
	subscriptionBuffer = 256
)

// Config bounds a Recorder.
type Config struct {
	// Replica names the process recording, in every entry.
	Replica string
	// Entries is the most entries kept per account (DefaultEntries when 0).
	Entries int
	// AccountBytes bounds the memory of one account's entries (DefaultAccountBytes when 0).
	AccountBytes int64
	// TotalBytes bounds the memory of every account's entries together (DefaultTotalBytes when
	// 0). Beyond it the account using the most loses its oldest entries first, so an account
	// flooding its endpoints cannot push out a quieter account's traffic.
	TotalBytes int64
}

// Source is where the console reads recorded traffic: this replica's Recorder today; a source
// joining other replicas' entries implements the same. Every method is confined to one account.
type Source interface {
	// List returns the account's entries matching f, newest first, older than the entry
	// before (every entry when before is 0), at most limit of them.
	List(account string, f Filter, before uint64, limit int) []*Entry
	// Get returns the account's entry recorded by replica with the id, or nil.
	Get(account, replica string, id uint64) *Entry
	// Subscribe follows the account's new entries as they are recorded.
	Subscribe(account string) (*Subscription, error)
}

// ErrTooManySubscribers refuses a live view beyond the account's limit.
var ErrTooManySubscribers = errors.New("inspect: too many live views of this account's traffic are open")

// Recorder keeps the entries of every account of this replica in memory. It is safe for
// concurrent use; Record is called on the data plane's path, once per finished request or
// connection, and takes one account's lock.
type Recorder struct {
	cfg   Config
	seq   atomic.Uint64
	total atomic.Int64
	// rings holds each account's *ring; read on every request, written once per account, which
	// is what sync.Map is made for (its reads take no lock).
	rings    sync.Map
	trimming sync.Mutex
}

// ring is one account's entries, oldest first, in a circular buffer that grows to the entry
// bound.
type ring struct {
	mu     sync.Mutex
	buf    []*Entry
	head   int
	n      int
	bytes  atomic.Int64 // written under mu, read without it to find the largest ring
	bodies atomic.Bool
	subs   map[*Subscription]struct{}
}

// NewRecorder returns an empty recorder with cfg's bounds.
func NewRecorder(cfg Config) *Recorder {
	if cfg.Entries <= 0 {
		cfg.Entries = DefaultEntries
	}
	if cfg.AccountBytes <= 0 {
		cfg.AccountBytes = DefaultAccountBytes
	}
	cfg.AccountBytes = max(cfg.AccountBytes, MinAccountBytes)
	if cfg.TotalBytes <= 0 {
		cfg.TotalBytes = DefaultTotalBytes
	}
	cfg.TotalBytes = max(cfg.TotalBytes, cfg.AccountBytes)
	return &Recorder{cfg: cfg}
}

// Config returns the recorder's bounds, defaults applied.
func (r *Recorder) Config() Config { return r.cfg }

// Replica is the name of the replica whose traffic this recorder keeps.
func (r *Recorder) Replica() string { return r.cfg.Replica }

// Bytes is the memory all entries are accounted for.
func (r *Recorder) Bytes() int64 { return r.total.Load() }

// ring returns the account's ring, making it when create is set (nil otherwise).
func (r *Recorder) ring(account string, create bool) *ring {
	if v, ok := r.rings.Load(account); ok {
		return v.(*ring)
	}
	if !create {
		return nil
	}
	v, _ := r.rings.LoadOrStore(account, &ring{})
	return v.(*ring)
}

// Bodies reports whether the account asked to keep bodies.
func (r *Recorder) Bodies(account string) bool {
	rg := r.ring(account, false)
	return rg != nil && rg.bodies.Load()
}

// SetBodies turns keeping the account's bodies on or off, from its next request on.
func (r *Recorder) SetBodies(account string, on bool) {
	r.ring(account, true).bodies.Store(on)
}

// Record keeps e, a finished request or connection of e.Account, and shows it to the account's
// live views. Oldest entries of the account make room for it; e must not be changed afterwards.
func (r *Recorder) Record(e *Entry) {
	if e.Account == "" {
		return // traffic no account served (an unknown host) belongs to nobody's inspector
	}
	e.ID = r.seq.Add(1)
	e.Replica = r.cfg.Replica
	capHeaders(e)
	e.size = e.measure()
	rg := r.ring(e.Account, true)
	rg.mu.Lock()
	rg.push(e, r.cfg.Entries)
	freed := int64(0)
	for rg.n > 1 && (rg.n > r.cfg.Entries || rg.bytes.Load() > r.cfg.AccountBytes) {
		freed += rg.pop()
	}
	for s := range rg.subs {
		s.offer(e)
	}
	rg.mu.Unlock()
	if r.total.Add(e.size-freed) > r.cfg.TotalBytes {
		r.trim()
	}
}

// push appends e, growing the buffer up to limit slots (the caller pops beyond).
func (rg *ring) push(e *Entry, limit int) {
	if rg.n == len(rg.buf) {
		grown := make([]*Entry, min(max(2*len(rg.buf), 16), limit+1))
		for i := range rg.n {
			grown[i] = rg.buf[(rg.head+i)%len(rg.buf)]
		}
		rg.buf, rg.head = grown, 0
	}
	rg.buf[(rg.head+rg.n)%len(rg.buf)] = e
	rg.n++
	rg.bytes.Add(e.size)
}

// pop drops the oldest entry and returns its size.
func (rg *ring) pop() int64 {
	e := rg.buf[rg.head]
	rg.buf[rg.head] = nil
	rg.head = (rg.head + 1) % len(rg.buf)
	rg.n--
	rg.bytes.Add(-e.size)
	return e.size
}

// at returns the i-th newest entry (0 is the newest).
func (rg *ring) at(i int) *Entry {
	return rg.buf[(rg.head+rg.n-1-i)%len(rg.buf)]
}

// trim brings the total back under seven eighths of its bound, taking the oldest entries of the
// account using the most memory first. One trim runs at a time; a Record finding one running
// leaves the work to it.
func (r *Recorder) trim() {
	if !r.trimming.TryLock() {
		return
	}
	defer r.trimming.Unlock()
	target := r.cfg.TotalBytes - r.cfg.TotalBytes/8
	for r.total.Load() > target {
		rg := r.largest()
		if rg == nil {
			return
		}
		rg.mu.Lock()
		// A quarter of the largest ring at a time, so that the scan for the largest is rare.
		goal := rg.bytes.Load() - rg.bytes.Load()/4
		var freed int64
		for rg.n > 0 && rg.bytes.Load() > goal && r.total.Load()-freed > target {
			freed += rg.pop()
		}
		rg.mu.Unlock()
		r.total.Add(-freed)
		if freed == 0 {
			return
		}
	}
}

// largest returns the ring using the most memory, or nil when every ring is empty.
func (r *Recorder) largest() *ring {
	var best *ring
	var most int64
	r.rings.Range(func(_, v any) bool {
		if rg := v.(*ring); rg.bytes.Load() > most {
			best, most = rg, rg.bytes.Load()
		}
		return true
	})
	return best
}

// List implements Source.
func (r *Recorder) List(account string, f Filter, before uint64, limit int) []*Entry {
	rg := r.ring(account, false)
	if rg == nil || limit <= 0 {
		return nil
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	var out []*Entry
	for i := 0; i < rg.n && len(out) < limit; i++ {
		e := rg.at(i)
		if (before == 0 || e.ID < before) && f.Match(e) {
			out = append(out, e)
		}
	}
	return out
}

// Get implements Source.
func (r *Recorder) Get(account, replica string, id uint64) *Entry {
	rg := r.ring(account, false)
	if rg == nil || replica != r.cfg.Replica {
		return nil
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	// IDs grow with time, so the entry is found by bisection.
	lo, hi := 0, rg.n
	for lo < hi {
		mid := (lo + hi) / 2
		e := rg.buf[(rg.head+mid)%len(rg.buf)]
		switch {
		case e.ID == id:
			return e
		case e.ID < id:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return nil
}

// Count returns how many entries the account has and the memory they are accounted for.
func (r *Recorder) Count(account string) (n int, bytes int64) {
	rg := r.ring(account, false)
	if rg == nil {
		return 0, 0
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return rg.n, rg.bytes.Load()
}

// Subscription is a live view of one account's new entries.
type Subscription struct {
	// C receives the entries as they are recorded.
	C    <-chan *Entry
	c    chan *Entry
	lost atomic.Bool
	r    *Recorder
	rg   *ring
	once sync.Once
}

// Subscribe implements Source.
func (r *Recorder) Subscribe(account string) (*Subscription, error) {
	rg := r.ring(account, true)
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if len(rg.subs) >= maxSubscribers {
		return nil, ErrTooManySubscribers
	}
	c := make(chan *Entry, subscriptionBuffer)
	s := &Subscription{C: c, c: c, r: r, rg: rg}
	if rg.subs == nil {
		rg.subs = map[*Subscription]struct{}{}
	}
	rg.subs[s] = struct{}{}
	return s, nil
}

// offer hands e to the view without waiting: a view that fell behind loses it, and is told.
func (s *Subscription) offer(e *Entry) {
	select {
	case s.c <- e:
	default:
		s.lost.Store(true)
	}
}

// Lost reports whether entries were dropped for this view since the last call (it fell
// behind); the view should then list again.
func (s *Subscription) Lost() bool { return s.lost.Swap(false) }

// Close ends the view.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.rg.mu.Lock()
		delete(s.rg.subs, s)
		s.rg.mu.Unlock()
	})
}

// maxHeaderRecord bounds each of an entry's two headers; the lines beyond are left out, and the
// entry says so in its note.
const maxHeaderRecord = 64 << 10

// capHeaders drops header lines past maxHeaderRecord from either header of e. The agent may
// answer with up to 1 MiB of response headers, which would otherwise let one response take a
// quarter of an account's default bound.
func capHeaders(e *Entry) {
	for _, hp := range [...]*Header{&e.RequestHeader, &e.ResponseHeader} {
		h := *hp
		if headerSize(h) <= maxHeaderRecord {
			continue
		}
		n := 24
		for i, f := range h {
			if n += 32 + len(f.Name) + len(f.Value); n > maxHeaderRecord {
				*hp = slices.Clone(h[:i]) // a new array: the old one would keep every line alive
				break
			}
		}
		if e.Note == "" {
			e.Note = "headers beyond 64 KiB were not kept"
		}
	}
}
