package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	ep "github.com/edgeplane/edgeplane"
)

// Large deletes.
//
// A delete removes, with the object, the objects that reference it with ep.RefCascade (the API
// keys and credentials of a bot user) and its children (the rules of an IP policy, the routes of
// an HTTPS edge). The children are bounded by the object limits (ep.MaxRulesPerIPPolicy,
// ep.MaxRoutesPerEdge), and go in the delete's one transaction, so that nothing, the data plane
// included, ever sees half a policy. The cascading referrers are not bounded: nothing limits how
// many keys a bot user owns, and one transaction deleting 10,000 of them held SQLite's single
// writer, and so every account's writes, for about 0.2 s (a million: about 17 s).
//
// So a delete whose cascade passes CascadeChunk objects runs in several transactions, each
// through the committer like any other write, so that other accounts' writes take their turns
// between them:
//
//  1. Hide: the object's kind becomes hiddenPrefix + kind. Every read the API makes names the
//     kind, so from this commit on the object is gone from the API's view (GET, list, PATCH and
//     a second DELETE answer 404), and writeRefs no longer lets anything reference it
//     (refTarget). If the object is a principal (a bot user), it is deactivated in the same
//     transaction: its keys and credentials stop authenticating at once, and no new key or
//     credential may name it as owner (principalGet skips principals whose object is hidden).
//  2. Chunks: the cascading referrers go, at most CascadeChunk per transaction (each with its
//     token, references, claims and secret, through the database's ON DELETE CASCADE).
//  3. Finish: the object's OnDelete (a bot user's principal) and its row, with its children, in
//     one last transaction, once no referrer is left.
//
// Each step is a committed transaction, so a crash between any two leaves a consistent database:
// the hidden row says that its delete is pending, and Open finishes every pending delete
// (finishPendingDeletes) before the store serves anything. A delete whose cascade fits in one
// chunk (every delete but a bot user's with more than CascadeChunk keys and credentials) is one
// transaction, as it always was.

// CascadeChunk is the most objects a delete removes in one transaction beyond the object itself
// and its children: at about 17 µs an object on SQLite (an API key with its token and reference),
// a chunk holds the writer for about 5 ms.
const CascadeChunk = 256

// hiddenPrefix marks the kind of an object whose delete has begun but not finished. Migration
// 0010 indexes such rows, for finishPendingDeletes.
const hiddenPrefix = "deleting:"

// hiddenLike matches the kinds of hidden objects (no wildcard in the prefix itself).
const hiddenLike = hiddenPrefix + "%"

// Statements of large deletes, rewritten for the dialect (s.d.rebind) where they run.
const (
	cascadeCountSQL = `SELECT count(*) FROM (SELECT 1 FROM refs WHERE to_id = ? AND mode = 2 LIMIT ?) c`
	cascadeAnySQL   = `SELECT 1 FROM refs WHERE to_id = ? AND mode = 2 LIMIT 1`
	childCountSQL   = `SELECT count(*) FROM objects WHERE parent_id = ?`
	hideSQL         = `UPDATE objects SET kind = ?, version = version + 1 WHERE id = ?`
	deactivateSQL   = `UPDATE principals SET active = 0 WHERE id = ? AND account_id = ?`
	hiddenGetSQL    = `SELECT doc FROM objects WHERE id = ? AND account_id = ? AND kind = ?`
	pendingSQL      = `SELECT id, account_id, kind FROM objects WHERE kind LIKE '` + hiddenLike + `' ORDER BY id`
)

// DeleteStats counts the transactions of deletes since the store opened, for the bound that
// the project sets on how long one account's delete may hold the writer: MaxObjects is the most
// objects any one delete transaction removed (the object, its children and its cascading
// referrers; each with its own bounded rows of tokens, references, claims and secrets).
type DeleteStats struct {
	// Deletes counts deletes that succeeded; Chunked those of them that ran in chunks.
	Deletes, Chunked uint64
	// Transactions counts the delete transactions committed, chunks and hides included.
	Transactions uint64
	// MaxObjects is the most objects one delete transaction removed.
	MaxObjects uint64
}

// deleteCounters are a store's DeleteStats.
type deleteCounters struct {
	deletes, chunked, transactions, maxObjects atomic.Uint64
}

// tx counts one committed delete transaction that removed n objects.
func (c *deleteCounters) tx(n int64) {
	c.transactions.Add(1)
	for {
		old := c.maxObjects.Load()
		if uint64(n) <= old || c.maxObjects.CompareAndSwap(old, uint64(n)) {
			return
		}
	}
}

// DeleteStats returns the store's delete counters.
func (s *Store) DeleteStats() DeleteStats {
	c := &s.deletes
	return DeleteStats{Deletes: c.deletes.Load(), Chunked: c.chunked.Load(),
		Transactions: c.transactions.Load(), MaxObjects: c.maxObjects.Load()}
}

// cascadeSize counts what a delete of the object with the id removes with it: its cascading
// referrers, only up to CascadeChunk+1 (more means the delete runs in chunks), and its children.
func (s *Store) cascadeSize(ctx context.Context, tx *wtx, id string) (refs, children int64, err error) {
	if err := tx.QueryRowContext(ctx, s.d.rebind(cascadeCountSQL), id, CascadeChunk+1).Scan(&refs); err != nil {
		return 0, 0, s.classify(err)
	}
	if err := tx.QueryRowContext(ctx, s.d.rebind(childCountSQL), id).Scan(&children); err != nil {
		return 0, 0, s.classify(err)
	}
	return refs, children, nil
}

// deleteReferrers deletes up to limit of the objects that reference the object with the id with
// ep.RefCascade, and returns how many it deleted. The ids are read first (q.cascade) and deleted
// by primary key: with the subquery in the DELETE, PostgreSQL may plan a join that walks the
// whole objects table (the ids of refs and objects differ in collation), which one chunk must
// not cost.
func (s *Store) deleteReferrers(ctx context.Context, tx *wtx, id string, limit int) (int64, error) {
	rows, err := tx.QueryContext(ctx, s.q.cascade, id, limit)
	if err != nil {
		return 0, s.classify(err)
	}
	var ids []any
	for rows.Next() {
		var from string
		if err := rows.Scan(&from); err != nil {
			rows.Close()
			return 0, s.classify(err)
		}
		ids = append(ids, from)
	}
	if err := rows.Close(); err != nil {
		return 0, s.classify(err)
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, s.classify(err)
	}
	r, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM objects WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`), ids...)
	if err != nil {
		return 0, s.classify(err)
	}
	n, err := r.RowsAffected()
	return n, s.classify(err)
}

// hide is step 1 of a chunked delete, inside the delete's first transaction: the object leaves
// the API's view, and if it is a principal it is deactivated.
func (s *Store) hide(ctx context.Context, tx *wtx, account string, res *ep.Resource, id string) error {
	if _, err := tx.ExecContext(ctx, s.d.rebind(hideSQL), hiddenPrefix+res.Kind, id); err != nil {
		return s.classify(err)
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(deactivateSQL), id, account)
	return s.classify(err)
}

// finishDelete is steps 2 and 3 of a chunked delete of a hidden object: chunks of its cascading
// referrers, each in a transaction of its own, then the object. It runs to the end whatever
// happens to the request that started it (ctx's cancellation is not passed on): stopping
// halfway would leave the delete pending until the next start. Another process finishing the
// same delete at the same time (a replica's start) is harmless: each step is idempotent, and the
// last one happens once.
func (s *Store) finishDelete(ctx context.Context, caller ep.Caller, res *ep.Resource, id string) error {
	ctx = context.WithoutCancel(ctx)
	for {
		var n int64
		err := s.inTx(ctx, func(ctx context.Context, tx *wtx) (err error) {
			n, err = s.deleteReferrers(ctx, tx, id, CascadeChunk)
			return err
		})
		if err != nil {
			return err
		}
		s.deletes.tx(n)
		if n == CascadeChunk {
			continue // perhaps more
		}
		done, err := s.finishHidden(ctx, caller, res, id)
		if err != nil || done {
			return err
		}
	}
}

// finishHidden is step 3: the hidden object's OnDelete and its row, in one transaction, when no
// cascading referrer is left. It reports whether the object is gone (also when another process
// removed it first); false means referrers remain (another process's chunk was still running
// when this one's came up short) and more chunks must run first.
func (s *Store) finishHidden(ctx context.Context, caller ep.Caller, res *ep.Resource, id string) (done bool, err error) {
	get := s.d.rebind(hiddenGetSQL + s.d.forUpdate())
	removed := false
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		done, removed = false, false
		var body []byte
		err := tx.QueryRowContext(ctx, get, id, caller.AccountID, hiddenPrefix+res.Kind).Scan(&body)
		if errors.Is(err, sql.ErrNoRows) {
			done = true // finished by someone else
			return nil
		}
		if err != nil {
			return s.classify(err)
		}
		var one int
		err = tx.QueryRowContext(ctx, s.d.rebind(cascadeAnySQL), id).Scan(&one)
		if err == nil {
			return nil // referrers left: more chunks first
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return s.classify(err)
		}
		if res.OnDelete != nil && res.New != nil {
			d, err := decode(res, body)
			if err != nil {
				return err
			}
			view := &txView{s: s, ctx: ctx, tx: tx, account: caller.AccountID}
			if err := res.OnDelete(&ep.Op{Ctx: ctx, Caller: caller, Tx: view, ID: id, Settings: s.Settings()}, d); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.q.del, id); err != nil {
			return s.classify(err)
		}
		done, removed = true, true
		return nil
	})
	if err == nil && removed {
		s.deletes.tx(1)
	}
	return done, err
}

// finishPendingDeletes finishes the deletes that a stopped process left hidden but unfinished.
// Open runs it before the store serves anything; migration 0010's partial index makes finding
// none a lookup in an empty index.
func (s *Store) finishPendingDeletes(ctx context.Context) error {
	type pending struct{ id, account, kind string }
	rows, err := s.r.QueryContext(ctx, s.d.rebind(pendingSQL))
	if err != nil {
		return s.classify(err)
	}
	var todo []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.id, &p.account, &p.kind); err != nil {
			rows.Close()
			return s.classify(err)
		}
		todo = append(todo, p)
	}
	if err := rows.Close(); err != nil {
		return s.classify(err)
	}
	if err := rows.Err(); err != nil {
		return s.classify(err)
	}
	for _, p := range todo {
		kind := strings.TrimPrefix(p.kind, hiddenPrefix)
		if err := s.finishDelete(ctx, ep.Caller{AccountID: p.account}, resourceOfKind(kind), p.id); err != nil {
			return err
		}
		s.committed(p.account, resourceOfKind(kind), nil)
	}
	return nil
}

// resourceOfKind returns the collection of a kind, or a bare one (no OnDelete) for a kind no
// collection of this build declares.
func resourceOfKind(kind string) *ep.Resource {
	for _, r := range append(ep.Resources, ep.LiveResources...) {
		if r.Kind == kind {
			return r
		}
	}
	return &ep.Resource{Kind: kind}
}
