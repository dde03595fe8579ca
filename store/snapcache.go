package store

import (
	"context"
	"strings"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// The snapshot cache.
//
// Every change of an account makes the data plane read the account again (Snapshot), and
// decoding every document of a large account (100,000 routes) costs most of a second of one
// core, whatever the change was. The snapshot cache keeps each account's decoded documents
// between snapshots, with the version each was read at; the next snapshot lists the account's
// ids and versions (no documents), reads and decodes only the rows that are new or whose version
// changed, and leaves out the ids that are gone. Every write to a document increments its
// version (objects.go, cascade.go, docsecrets.go), so an unchanged version is an unchanged
// document, in this process or any other.
//
// The documents are kept with their secrets opened, in memory only. Anything that may give a
// row back an older version with other content (Import) or re-seal the secrets (RotateSecrets)
// empties the cache, and so does a lost change feed (AllAccounts): the next snapshot of every
// account is a full read.
//
// Bounds: an account not snapshotted for snapCacheIdle is dropped, and the documents kept add
// up to at most snapCacheBudget bytes of JSON (the least recently snapshotted accounts go
// first); an account larger than the whole budget is never kept and is read in full every time,
// as it was before the cache.

// snapCacheIdle is how long an account's documents are kept without a snapshot of the account.
// The data plane snapshots every account it routes at its periodic resync (30 s), so only the
// accounts that left the plan age out.
const snapCacheIdle = 5 * time.Minute

// snapCacheBudget bounds the JSON bytes of the documents kept across all accounts. The decoded
// documents are mostly the same objects the current routing plan holds, so what the cache adds
// to the process's memory is well below this.
const snapCacheBudget = 96 << 20

// snapFetchChunk is how many changed ids one query reads.
const snapFetchChunk = 500

// snapEntry is one cached document and the version it was read at.
type snapEntry struct {
	version int64
	size    int
	doc     ep.Document
}

// snapAccount is one account's cached documents by kind and id.
type snapAccount struct {
	kinds map[string]map[string]snapEntry
	bytes int64
	used  time.Time
}

// snapCache holds the accounts' cached documents. An account's entry is taken out while a
// snapshot uses it and put back afterwards, so two snapshots of the same account never share
// one; the generation makes a snapshot that started before a reset put nothing back.
type snapCache struct {
	mu       sync.Mutex
	gen      uint64
	accounts map[string]*snapAccount
	bytes    int64
	budget   int64
}

// take removes and returns the account's cached documents (nil if none) and the generation.
func (c *snapCache) take(account string, now time.Time) (*snapAccount, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, e := range c.accounts {
		if now.Sub(e.used) > snapCacheIdle {
			c.bytes -= e.bytes
			delete(c.accounts, a)
		}
	}
	e := c.accounts[account]
	if e != nil {
		c.bytes -= e.bytes
		delete(c.accounts, account)
	}
	return e, c.gen
}

// put keeps the account's documents read at generation gen, unless the cache was reset since or
// they do not fit the budget; the least recently used accounts make room.
func (c *snapCache) put(account string, e *snapAccount, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	budget := c.budget
	if budget == 0 {
		budget = snapCacheBudget
	}
	if gen != c.gen || e.bytes > budget {
		return
	}
	if c.accounts == nil {
		c.accounts = map[string]*snapAccount{}
	}
	for c.bytes+e.bytes > budget {
		oldest := ""
		for a, o := range c.accounts {
			if oldest == "" || o.used.Before(c.accounts[oldest].used) {
				oldest = a
			}
		}
		if oldest == "" {
			break
		}
		c.bytes -= c.accounts[oldest].bytes
		delete(c.accounts, oldest)
	}
	if old := c.accounts[account]; old != nil { // a concurrent snapshot put one back first
		c.bytes -= old.bytes
	}
	c.accounts[account] = e
	c.bytes += e.bytes
}

// reset drops every cached document: the next snapshot of every account is a full read.
func (c *snapCache) reset() {
	c.mu.Lock()
	c.gen++
	c.accounts = nil
	c.bytes = 0
	c.mu.Unlock()
}

// snapRow is one listed row: its id and version.
type snapRow struct {
	id      string
	version int64
}

// snapshotObjects returns the account's documents of collection res in id order, as
// accountObjects does, with their secrets opened; documents whose version is in the cache are
// taken from it, the others read and decoded. It updates e's entries for res.
func (s *Store) snapshotObjects(ctx context.Context, account string, res *ep.Resource, e *snapAccount) ([]ep.Document, error) {
	old := e.kinds[res.Kind]
	next := make(map[string]snapEntry, len(old))
	var rows []snapRow
	var missing []string
	if len(old) == 0 {
		// Nothing cached: one full read, documents and versions together.
		if err := s.readSnapRows(ctx, `SELECT id, version, doc FROM objects WHERE account_id = ? AND kind = ? ORDER BY id`,
			[]any{account, res.Kind}, res, next, &rows); err != nil {
			return nil, err
		}
	} else {
		q, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT id, version FROM objects WHERE account_id = ? AND kind = ? ORDER BY id`), account, res.Kind)
		if err != nil {
			return nil, s.classify(err)
		}
		rows = make([]snapRow, 0, len(old)) // sized: a large account's listing grew it step by step
		for q.Next() {
			var r snapRow
			if err := q.Scan(&r.id, &r.version); err != nil {
				q.Close()
				return nil, s.classify(err)
			}
			rows = append(rows, r)
			if o, ok := old[r.id]; ok && o.version == r.version {
				next[r.id] = o
			} else {
				missing = append(missing, r.id)
			}
		}
		q.Close()
		if err := q.Err(); err != nil {
			return nil, s.classify(err)
		}
		for len(missing) > 0 {
			n := min(len(missing), snapFetchChunk)
			args := []any{account, res.Kind}
			for _, id := range missing[:n] {
				args = append(args, id)
			}
			query := `SELECT id, version, doc FROM objects WHERE account_id = ? AND kind = ? AND id IN (?` + strings.Repeat(", ?", n-1) + `)`
			if err := s.readSnapRows(ctx, query, args, res, next, nil); err != nil {
				return nil, err
			}
			missing = missing[n:]
		}
	}
	out := make([]ep.Document, 0, len(rows))
	for _, r := range rows {
		// A row changed or deleted between the listing and the read of its document is taken as
		// read (the newer state); one deleted is left out.
		if en, ok := next[r.id]; ok {
			out = append(out, en.doc)
			e.bytes += int64(en.size)
		}
	}
	e.kinds[res.Kind] = next
	return out, nil
}

// readSnapRows reads rows of id, version and document, decodes and opens the documents into
// next and, when rows is not nil, lists the rows in the order read.
func (s *Store) readSnapRows(ctx context.Context, query string, args []any, res *ep.Resource, next map[string]snapEntry, rows *[]snapRow) error {
	q, err := s.r.QueryContext(ctx, s.d.rebind(query), args...)
	if err != nil {
		return s.classify(err)
	}
	defer q.Close()
	for q.Next() {
		var r snapRow
		var body []byte
		if err := q.Scan(&r.id, &r.version, &body); err != nil {
			return s.classify(err)
		}
		d, err := decode(res, body)
		if err != nil {
			return err
		}
		if err := s.openFields(res, d); err != nil {
			return err
		}
		next[r.id] = snapEntry{version: r.version, size: len(body), doc: d}
		if rows != nil {
			*rows = append(*rows, r)
		}
	}
	return s.classify(q.Err())
}
