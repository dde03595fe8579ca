package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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
// The header is read with pread on a descriptor of the -shm file, not through a mapping, so a
// shorter file can never fault; SQLite writes the header twice and a reader that finds the two
// copies different (a write in progress) does not use the cache for that request. A dedicated
// connection stays open for the store's life, so the -shm file this process reads is the one
// every other connection uses (SQLite deletes it only when the last connection closes).
//
// Only SQLite has such a header; on PostgreSQL there is no cache and every request reads the
// database.

// walHeaderSize is the size of one copy of the wal-index header; two copies start the -shm file.
const walHeaderSize = 48

// walVersion is a wal-index header, compared as a whole.
type walVersion [walHeaderSize]byte

// Read cache bounds: beyond them an entry is not added (the cache empties at the next commit).
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

// Rendered is a response body rendered from one cached object by the server, kept with the object
// so that answering the same unchanged object again costs neither decoding nor encoding; it goes
// when the object's cache entry goes, at the next change of the database. The store never reads
// it. The body is kept under a key naming how it was rendered (the server's base URL), so that
// servers rendering differently never see each other's bodies.
type Rendered struct{ p atomic.Pointer[rendering] }

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

// Store keeps body, rendered under key; body must not be changed afterwards.
func (r *Rendered) Store(key string, body []byte) { r.p.Store(&rendering{key, body}) }

// ReadCacheStats counts the read cache's answers since the store opened.
type ReadCacheStats struct {
	// Hits were answered from memory; Misses read the database (the database had changed, the
	// entry was missing, or its header was being written).
	Hits, Misses uint64
}

type readCache struct {
	shm      *os.File
	sentinel *sql.DB

	hits, misses atomic.Uint64

	mu   sync.RWMutex
	ver  walVersion
	keys map[string]keyRow
	objs map[string]cachedObject
}

// openReadCache starts the read cache of the SQLite database at path, whose WAL the store's
// connections have already opened; dsn opens the connection that keeps it open.
func openReadCache(ctx context.Context, path, dsn string) (*readCache, error) {
	sentinel, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	sentinel.SetMaxOpenConns(1)
	sentinel.SetMaxIdleConns(1)
	sentinel.SetConnMaxLifetime(0)
	sentinel.SetConnMaxIdleTime(0)
	var n int
	// A read of the database opens the WAL and the wal-index of this connection.
	if err := sentinel.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		sentinel.Close()
		return nil, fmt.Errorf("store: read cache: %w", err)
	}
	shm, err := os.Open(path + "-shm")
	if err != nil {
		sentinel.Close()
		return nil, fmt.Errorf("store: read cache: %w", err)
	}
	c := &readCache{shm: shm, sentinel: sentinel, keys: map[string]keyRow{}, objs: map[string]cachedObject{}}
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
	var buf [2 * walHeaderSize]byte
	if n, err := c.shm.ReadAt(buf[:], 0); n != len(buf) || err != nil {
		return v, false
	}
	// Byte 12 is isInit; the copies differ while a writer is between its two writes.
	if buf[12] != 1 || [walHeaderSize]byte(buf[:walHeaderSize]) != [walHeaderSize]byte(buf[walHeaderSize:]) {
		return v, false
	}
	return walVersion(buf[:walHeaderSize]), true
}

// key returns the API key of selector if it was read at version v.
func (c *readCache) key(v walVersion, selector string) (keyRow, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ver != v {
		return keyRow{}, false
	}
	k, ok := c.keys[selector]
	return k, ok
}

// keyAndObject returns the API key of selector and the object id if both were read at version v.
func (c *readCache) keyAndObject(v walVersion, selector, id string) (keyRow, cachedObject, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ver != v {
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

// put adds what one query read at version v; obj may be nil.
func (c *readCache) put(v walVersion, selector string, k keyRow, id string, obj *cachedObject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ver != v {
		c.ver = v
		clear(c.keys)
		clear(c.objs)
	}
	if len(c.keys) < maxCachedKeys {
		c.keys[selector] = k
	}
	if obj != nil && len(c.objs) < maxCachedObjects {
		c.objs[id] = *obj
	}
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
	return ReadCacheStats{Hits: s.cache.hits.Load(), Misses: s.cache.misses.Load()}
}
