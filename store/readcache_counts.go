package store

import (
	"database/sql"
	"slices"
)

// Child counts in the read cache (SQLite).
//
// Every create of a child with a limit on its siblings (a rule of an IP policy, a route of an
// edge) counts its parent's children first (CountChildren), on the committer's serial path. The
// count walks the parent's index entries, so it costs more the more children the parent has:
// about 85 ns each, 85 µs for a policy at its 1,000 rules, where the rest of a create costs the
// committer about 40 µs. The read cache keeps the counts it has seen, under the same rule as
// everything else it holds: a count is the count at one wal-index header and is used only at
// that header. The committer carries counts across its own commits exactly: a committed insert
// of a child adds one to its parent's count; any statement the write set cannot name (a delete,
// which also cascades, a change of an object's kind) empties them; and a commit by any other
// process makes them stale with the rest of the cache.
//
// Inside a batch, a count is answered from the cache only while no earlier member of the batch
// inserted a child of the same parent and kind (the transaction then sees more than the header's
// state); the inserts of a member that fails are forgotten with it, since its savepoint (or
// SQLite, for a failed statement) takes them back.

// maxCachedCounts bounds the child counts the cache keeps: each is three short strings (two ids
// and a kind) and an int, about 150 bytes with the map's own, so 2.5 MB at most.
const maxCachedCounts = 16384

// childKey names one count: the children of kind under parent in account.
type childKey struct{ parent, account, kind string }

// done records what a write statement that succeeded adds to the child counts: an insert of an
// object (queries.insert, args id, account, kind, parent, created_at, doc) adds one to its
// parent's count, if it has a parent. Unlike note, which runs before the statement and may name
// more than it writes, it counts only rows that were written.
func (w *writeSet) done(query string, args []any) {
	if w == nil || query != w.q.insert {
		return
	}
	w.child(args)
}

// child records that the insert with args adds one to its parent's count.
func (w *writeSet) child(args []any) {
	account, ok1 := args[1].(string)
	kind, ok2 := args[2].(string)
	parent, ok3 := args[3].(sql.NullString)
	if !ok1 || !ok2 || !ok3 {
		w.anything()
		return
	}
	if parent.Valid {
		w.children = append(w.children, childKey{parent.String, account, kind})
	}
}

// mark returns the position in the write set's inserted children before a batch member runs, for
// forget.
func (w *writeSet) mark() int {
	if w == nil {
		return 0
	}
	return len(w.children)
}

// forget drops the children inserted after mark: the member that inserted them failed, and
// nothing it wrote will be committed.
func (w *writeSet) forget(mark int) {
	if w != nil && mark <= len(w.children) {
		w.children = w.children[:mark]
	}
}

// countUsable reports whether the cache's count of key, at the state the transaction started in,
// is also what the transaction sees now: nothing unnamed was written and no earlier insert of the
// transaction added a child under key.
func (w *writeSet) countUsable(key childKey) bool {
	return w != nil && w.ok && !w.all && !slices.Contains(w.children, key)
}

// count returns the number of children under key as the transaction sees it, if the cache holds
// it from the state the transaction started in.
func (w *writeSet) count(key childKey) (int, bool) {
	if !w.countUsable(key) {
		return 0, false
	}
	c := w.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ver != w.ver {
		return 0, false
	}
	n, ok := c.counts[key]
	return n, ok
}

// fillCount keeps a count the transaction read from the database, under the same conditions as
// count.
func (w *writeSet) fillCount(key childKey, n int) {
	if !w.countUsable(key) {
		return
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ver != w.ver {
		if c.pending != nil {
			return
		}
		c.reset(w.ver)
	}
	if _, ok := c.counts[key]; ok || len(c.counts) < maxCachedCounts {
		c.counts[key] = n
	}
}

// carryCounts moves the counts across a commit of w that the cache is carried over: each
// committed child adds one to a count the cache holds. The caller holds c.mu for writing, and
// has already emptied the counts if w wrote anything it cannot name.
func (c *readCache) carryCounts(w *writeSet) {
	for _, k := range w.children {
		if n, ok := c.counts[k]; ok {
			c.counts[k] = n + 1
		}
	}
}
