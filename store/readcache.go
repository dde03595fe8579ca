package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	ep "github.com/edgeplane/edgeplane"
)

// The read cache (SQLite).
//
// Nearly every request authenticates, and automation reads objects by id far more often than it
// changes them. Each of those reads is a SQLite query: a read transaction with its locks and the
// statement's execution, which on this driver costs more than everything else a GET does. The
// read cache answers them from memory when the database has not changed since the answer was
// read, and only then.
//
// "Has not changed" is asked of SQLite itself, so it holds across processes: in WAL mode every
// connection of every process finds the database's state in the header of the wal-index (the
// -shm file, https://www.sqlite.org/walformat.html), which a writer rewrites on every commit
// (its change counter, frame count and checksums) and only then. The cache keeps answers read
// at one header; any other header (a commit by this process or by any other, a WAL reset, a
// recovery) makes every entry stale, and the next read goes to the database and fills the cache
// for the new header. An entry is filled only if the header was the same before and after the
// query that read it, so it is never attributed to a state it was not read in.
//
// The header is read through a mapping of the -shm file's first page (walindex.go: a fault,
// should another program truncate the file, is a failed read, not a crash); SQLite writes the
// header twice and a reader that finds the two copies different (a write in progress) does not
// use the cache for that request. A dedicated connection stays open for the store's life, so the
// -shm file this process reads is the one every other connection uses (SQLite deletes it only
// when the last connection closes).
//
// Only SQLite has such a header; on PostgreSQL there is no cache and every request reads the
// database.
//
// This process's own commits. Emptying the cache at every commit would make it useless on a
// server that is written to all the time (a create authenticates, and most creates check a
// parent or a referenced object). The committer therefore carries the cache across its own
// commits: it reads the header after BEGIN, while it holds the write lock and nobody else can
// commit, notes every object its transaction writes, and after COMMIT reads the header again.
// SQLite increments the header's change counter by exactly one per commit (and never otherwise),
// so if the counter advanced by one, the new state is the old one plus this transaction and
// nothing else; the cache then drops what the transaction wrote and moves to the new header.
// Any other difference (another process committed in between) empties it as before. While that
// commit is in flight, readers that already see the new header do not empty the cache either:
// they read the database, and the committer settles the cache a moment later.
//
// Inside a write transaction, an object that no earlier member of the batch wrote is the same as
// in the state the transaction started from; reads of such objects may be answered from the
// cache at that state (writeSet.cached), which takes the parent and reference checks of creates
// off the committer's serial path.

// walHeaderSize is the size of one copy of the wal-index header; two copies start the -shm file.
const walHeaderSize = 48

// walVersion is a wal-index header, compared as a whole.
type walVersion [walHeaderSize]byte

// changes is the header's iChange, the counter SQLite increments by one at every commit. The
// wal-index is shared memory in the machine's byte order.
func (v walVersion) changes() uint32 { return binary.NativeEndian.Uint32(v[8:12]) }

// Read cache bounds on entries: beyond them an entry is not added (the cache empties at the next
// commit). Its bound in bytes is readCache.budget (readcache_budget.go).
const (
	maxCachedKeys    = 4096
	maxCachedObjects = 16384
)

// cachedObject is an object row as the read cache keeps it.
type cachedObject struct {
	account, kind string
	parent        sql.NullString
	doc           []byte
	rendered      *Rendered
}

// newCachedObject is the cache entry of an object of collection res read from the database.
// Objects of collections that embed others get no rendered body: theirs depends on other rows.
func newCachedObject(account string, res *ep.Resource, parent sql.NullString, doc []byte) cachedObject {
	o := cachedObject{account: account, kind: res.Kind, parent: parent, doc: doc}
	if res.Embeds == nil {
		o.rendered = &Rendered{limit: renderLimit(len(doc))}
	}
	return o
}

// Rendered is a response body rendered from one cached object by the server, kept with the object
// so that answering the same unchanged object again costs neither decoding nor encoding; it goes
// when the object's cache entry goes, at the next change of the database. The store never reads
// it. The body is kept under a key naming how it was rendered (the server's base URL), so that
// servers rendering differently never see each other's bodies.
type Rendered struct {
	p atomic.Pointer[rendering]
	// limit is the largest body kept, which the cache's byte count reserves for it in advance.
	limit int
}

type rendering struct {
	key  string
	body []byte
}

// Body returns the body rendered under key, or nil if there is none.
func (r *Rendered) Body(key string) []byte {
	if p := r.p.Load(); p != nil && p.key == key {
		return p.body
	}
	return nil
}

// Fits reports whether a body of n bytes would be kept by Store: a body larger is not worth
// making in one piece for the cache. A nil Rendered keeps nothing.
func (r *Rendered) Fits(n int) bool { return r != nil && n <= r.limit }

// Store keeps body, rendered under key; body must not be changed afterwards. A body larger than
// the room the cache reserved for it is not kept (the next request renders it again).
func (r *Rendered) Store(key string, body []byte) {
	if len(body) <= r.limit {
		r.p.Store(&rendering{key, body})
	}
}

// ReadCacheStats counts the read cache's answers since the store opened.
type ReadCacheStats struct {
	// Hits were answered from memory; Misses read the database (the database had changed, the
	// entry was missing, or its header was being written).
	Hits, Misses uint64
	// Entries is the number of API keys and objects cached now, and Bytes what they are counted
	// as against the cache's budget (DefaultReadCacheBytes): their documents, the room reserved
	// for their rendered bodies and a fixed overhead each.
	Entries int
	Bytes   int64
}

type readCache struct {
	shm      *walIndex
	sentinel *sql.DB

	hits, misses atomic.Uint64

	mu   sync.RWMutex
	ver  walVersion
	keys map[string]keyRow
	objs map[string]cachedObject
	// counts are children counted at ver (readcache_counts.go).
	counts map[childKey]int
	// bytes is what the entries are counted as (cost, keyCost), at most budget.
	bytes, budget int64
	// pending is the write set of the transaction this process's committer is committing, when
	// it started at ver: until it settles, the cache is not emptied by readers, and it answers
	// those that already see the commit's header with what the transaction did not write.
	pending *writeSet
}

// openReadCache starts the read cache of the SQLite database at path, whose WAL the store's
// connections have already opened; dsn opens the connection that keeps it open.
func openReadCache(ctx context.Context, path, dsn string) (*readCache, error) {
	sentinel, shm, err := openWALIndex(ctx, path, dsn)
	if err != nil {
		return nil, fmt.Errorf("store: read cache: %w", err)
	}
	c := &readCache{shm: shm, sentinel: sentinel, keys: map[string]keyRow{}, objs: map[string]cachedObject{},
		counts: map[childKey]int{}, budget: DefaultReadCacheBytes}
	if _, ok := c.version(); !ok {
		c.close()
		return nil, errors.New("store: read cache: no valid wal-index header")
	}
	return c, nil
}

func (c *readCache) close() {
	if c == nil {
		return
	}
	c.shm.Close()
	c.sentinel.Close()
}

// version reads the database's current wal-index header; ok is false while it is being written
// (or cannot be read), and then nothing may be answered from or added to the cache.
func (c *readCache) version() (v walVersion, ok bool) {
	if c == nil {
		return v, false
	}
	return c.shm.header()
}

// at reports whether entries of the cache hold at version v: the cache's own version, or the
// one right after a commit in flight (pending), for the entries that commit did not write. The
// caller holds c.mu.
func (c *readCache) at(v walVersion) (pending *writeSet, ok bool) {
	if c.ver == v {
		return nil, true
	}
	// The commit in flight is the only one that can follow ver: it holds the write lock.
	if p := c.pending; p != nil && v.changes() == c.ver.changes()+1 {
		return p, true
	}
	return nil, false
}

// key returns the API key of selector if it was read at version v.
func (c *readCache) key(v walVersion, selector string) (keyRow, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p, ok := c.at(v); !ok || !p.keptKeys() {
		return keyRow{}, false
	}
	k, ok := c.keys[selector]
	return k, ok
}

// keyAndObject returns the API key of selector and the object id if both were read at version v.
func (c *readCache) keyAndObject(v walVersion, selector, id string) (keyRow, cachedObject, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p, ok := c.at(v); !ok || !p.keptKeys() || !p.keptObject(id) {
		return keyRow{}, cachedObject{}, false
	}
	k, ok := c.keys[selector]
	if !ok {
		return keyRow{}, cachedObject{}, false
	}
	o, ok := c.objs[id]
	return k, o, ok
}

// fill adds what one query read, if the header is still v, the one read before the query: only
// then is it known which state the query saw. obj may be nil.
func (c *readCache) fill(v walVersion, selector string, k keyRow, id string, obj *cachedObject) {
	if after, ok := c.version(); ok && after == v {
		c.put(v, selector, k, id, obj)
	}
}

// put adds what one query read at version v; obj may be nil, and so may selector be "".
func (c *readCache) put(v walVersion, selector string, k keyRow, id string, obj *cachedObject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ver != v {
		if c.pending != nil {
			return // settle decides what of the cache survives the commit in flight
		}
		c.reset(v)
	}
	if selector != "" {
		c.addKey(selector, k)
	}
	if obj != nil {
		c.addObject(id, *obj)
	}
}

// reset empties the cache and moves it to version v. The caller holds c.mu for writing.
func (c *readCache) reset(v walVersion) {
	c.ver = v
	c.clearKeys()
	c.clearObjects()
	clear(c.counts)
}

// object returns the object with the id if it was read at version v.
func (c *readCache) object(v walVersion, id string) (cachedObject, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p, ok := c.at(v); !ok || !p.keptObject(id) {
		return cachedObject{}, false
	}
	o, ok := c.objs[id]
	return o, ok
}

// writeSet is what one write transaction of the committer (a batch) changes, as far as the read
// cache is concerned, and the state it started from.
type writeSet struct {
	c *readCache
	q *queries
	// ver is the header read after BEGIN, while the transaction holds the write lock; ok is
	// false when it could not be read, and then the cache is neither used nor carried forward.
	ver walVersion
	ok  bool
	// objs are the ids of the objects written; keys is set when API keys or their owners may
	// have changed, all when anything else may have (a delete cascades to objects nobody named).
	objs      []string
	keys, all bool
	// children are the parents (with account and kind) of the objects inserted, one entry per
	// insert, for the child counts (readcache_counts.go).
	children []childKey
}

// beginWrite starts the write set of a transaction that has just begun and holds the write lock.
// It is nil without a cache.
func (c *readCache) beginWrite(q *queries) *writeSet {
	if c == nil {
		return nil
	}
	v, ok := c.version()
	return &writeSet{c: c, q: q, ver: v, ok: ok}
}

// note records what the write statement query with args changes. Statements on tables the cache
// does not hold change nothing in it; a statement it does not know changes everything.
func (w *writeSet) note(query string, args []any) {
	if w == nil {
		return
	}
	q := w.q
	switch query {
	case q.insert:
		// A new object cannot be cached yet, but its id goes all the same, to be sure.
		w.object(args, 0)
	case q.update:
		w.object(args, 1)
	case q.refsIns, q.refsDel, q.claimIns, q.claimsDel, q.secretIns:
	case q.tokenIns, q.principalPut, q.principalDel, q.principalIns, q.accountIns:
		w.keys = true
	default:
		w.anything()
	}
}

// anything records a write the set cannot name: the cache keeps nothing across it.
func (w *writeSet) anything() {
	if w != nil {
		w.all = true
	}
}

func (w *writeSet) object(args []any, i int) {
	if id, ok := args[i].(string); ok {
		w.objs = append(w.objs, id)
	} else {
		w.anything()
	}
}

// keptKeys reports whether the transaction left every API key as it was; a nil set changes
// nothing.
func (w *writeSet) keptKeys() bool { return w == nil || !(w.all || w.keys) }

// keptObject reports whether the transaction left the object with the id as it was.
func (w *writeSet) keptObject(id string) bool {
	return w == nil || !(w.all || slices.Contains(w.objs, id))
}

// mayUse reports whether the cache's entry for the object with the id, at the state the
// transaction started in, is also what the transaction sees now.
func (w *writeSet) mayUse(id string) bool { return w != nil && w.ok && w.keptObject(id) }

// cached returns the object with the id as the transaction sees it, if the cache holds it from
// the state the transaction started in and the transaction has not written it.
func (w *writeSet) cached(id string) (cachedObject, bool) {
	if !w.mayUse(id) {
		return cachedObject{}, false
	}
	return w.c.object(w.ver, id)
}

// fill adds an object the transaction read, under the same conditions as cached.
func (w *writeSet) fill(id string, obj cachedObject) {
	if !w.mayUse(id) {
		return
	}
	w.c.put(w.ver, "", keyRow{}, id, &obj)
}

// committing says the transaction is about to commit: until settle, readers that see a newer
// header leave the cache alone.
func (w *writeSet) committing() {
	if w == nil || !w.ok {
		return
	}
	w.c.mu.Lock()
	if w.c.ver == w.ver {
		w.c.pending = w
	}
	w.c.mu.Unlock()
}

// settle ends a commit that committing announced: committed says whether it succeeded. The cache
// is carried to the new header when exactly this transaction lies between the two headers;
// otherwise it is left to go stale.
func (w *writeSet) settle(committed bool) {
	if w == nil || !w.ok {
		return
	}
	after, ok := w.c.version()
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != w {
		return
	}
	c.pending = nil
	if !committed || !ok || c.ver != w.ver || after.changes() != w.ver.changes()+1 {
		return
	}
	switch {
	case w.all:
		c.clearKeys()
		c.clearObjects()
		clear(c.counts)
	case w.keys:
		c.clearKeys()
	}
	for _, id := range w.objs {
		c.dropObject(id)
	}
	c.carryCounts(w)
	c.ver = after
}

func (c *readCache) count(hit bool) {
	if hit {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
}

// ReadCacheStats returns the read cache's counters; both are zero where there is no read cache
// (PostgreSQL).
func (s *Store) ReadCacheStats() ReadCacheStats {
	if s.cache == nil {
		return ReadCacheStats{}
	}
	c := s.cache
	c.mu.RLock()
	defer c.mu.RUnlock()
	return ReadCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: len(c.keys) + len(c.objs), Bytes: c.bytes}
}
