package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// queries are the statements of the generic object code, rewritten once for the dialect.
type queries struct {
	get, getLocked, refTarget, getParent, list, listChild, insert    string
	update, del                                                      string
	restricted, cascade, refsDel, refsIns                            string
	claimGet, claimIns, claimsDel, tokenIns                          string
	principalGet, principalPut, principalDel, auth, authGet          string
	accountByName, accountIns, accountsAny, principalIns, accountGet string
	secretIns, secretGet                                             string
	// children and parentLocked serve CountChildren (limits.go).
	children, parentLocked string
}

func prepare(d dialect) queries {
	q := queries{
		get:       `SELECT doc, parent_id, version FROM objects WHERE id = ? AND account_id = ? AND kind = ?`,
		getParent: `SELECT kind FROM objects WHERE id = ? AND account_id = ?`,
		// Pages order by id || '' (the id's bytes) so that only the paging indexes can serve them
		// (see migration 0003): never a walk of the primary key past other accounts' objects.
		list:         `SELECT doc FROM objects WHERE account_id = ? AND kind = ? AND id || '' < ? ORDER BY id || '' DESC LIMIT ?`,
		listChild:    `SELECT doc FROM objects WHERE parent_id = ? AND account_id = ? AND kind = ? AND id || '' < ? ORDER BY id || '' DESC LIMIT ?`,
		insert:       `INSERT INTO objects (id, account_id, kind, parent_id, version, created_at, doc) VALUES (?, ?, ?, ?, 1, ?, ?)`,
		update:       `UPDATE objects SET doc = ?, version = version + 1 WHERE id = ? AND version = ?`,
		del:          `DELETE FROM objects WHERE id = ?`,
		restricted:   `SELECT from_id FROM refs WHERE to_id = ? AND mode = 1 LIMIT 1`,
		cascade:      `SELECT from_id FROM refs WHERE to_id = ? AND mode = 2 LIMIT ?`,
		refsDel:      `DELETE FROM refs WHERE from_id = ?`,
		refsIns:      `INSERT INTO refs (from_id, to_id, mode) VALUES (?, ?, ?)`,
		claimGet:     `SELECT account_id, object_id FROM claims WHERE namespace = ? AND value = ?`,
		claimIns:     `INSERT INTO claims (namespace, value, account_id, object_id) VALUES (?, ?, ?, ?)`,
		claimsDel:    `DELETE FROM claims WHERE object_id = ?`,
		tokenIns:     `INSERT INTO tokens (selector, hash, kind, account_id, object_id, principal_id) VALUES (?, ?, ?, ?, ?, ?)`,
		principalGet: `SELECT id, account_id, role, active FROM principals WHERE id = ? AND account_id = ? AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.id = principals.id AND o.kind LIKE '` + hiddenLike + `')`,
		principalPut: `INSERT INTO principals (id, account_id, role, active, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET active = excluded.active`,
		principalDel: `DELETE FROM principals WHERE id = ? AND account_id = ?`,
		auth: `SELECT t.hash, t.account_id, t.object_id, p.id, p.role, p.active
			FROM tokens t JOIN principals p ON p.id = t.principal_id WHERE t.selector = ? AND t.kind = ?`,
		// auth and get in one statement (AuthenticateGet); the object columns are NULL when the
		// account has no such object.
		authGet: `SELECT t.hash, t.account_id, t.object_id, p.id, p.role, p.active, o.doc, o.parent_id
			FROM tokens t JOIN principals p ON p.id = t.principal_id
			LEFT JOIN objects o ON o.id = ? AND o.account_id = t.account_id AND o.kind = ?
			WHERE t.selector = ? AND t.kind = ?`,
		accountByName: `SELECT a.id, p.id FROM accounts a JOIN principals p ON p.account_id = a.id AND p.role = 'admin'
			WHERE a.name = ? ORDER BY p.id LIMIT 1`,
		accountIns:   `INSERT INTO accounts (id, name, created_at) VALUES (?, ?, ?)`,
		accountsAny:  `SELECT COUNT(*) FROM accounts`,
		principalIns: `INSERT INTO principals (id, account_id, role, active, created_at) VALUES (?, ?, ?, ?, ?)`,
		accountGet:   `SELECT id FROM accounts WHERE id = ?`,
		secretIns:    secretIns,
		secretGet:    secretGet,
		children:     `SELECT count(*) FROM objects WHERE parent_id = ? AND account_id = ? AND kind = ?`,
		parentLocked: `SELECT id FROM objects WHERE id = ? AND account_id = ?` + d.forUpdate(),
	}
	if d.name() == "sqlite" {
		// SQLite pages with objects_versions, which orders an account's objects of a kind by id
		// as objects_page does on PostgreSQL; naming it leaves the planner no other choice, and
		// one index fewer is one B-tree insert fewer per create (migration 0020).
		q.list = `SELECT doc FROM objects INDEXED BY objects_versions WHERE account_id = ? AND kind = ? AND id < ? ORDER BY id DESC LIMIT ?`
	}
	// Inside write transactions: a delete locks its row, and writing a reference share-locks the
	// target, so on PostgreSQL a delete and a new reference to the same object cannot both
	// succeed (the later one sees the other's commit).
	q.getLocked = q.get + d.forUpdate()
	// An object whose delete has begun (cascade.go) takes no new references.
	q.refTarget = `SELECT id FROM objects WHERE id = ? AND kind NOT LIKE '` + hiddenLike + `'` + d.forShare()
	for _, p := range []*string{&q.get, &q.getLocked, &q.refTarget, &q.getParent, &q.list, &q.listChild, &q.insert, &q.update, &q.del,
		&q.restricted, &q.cascade, &q.refsDel, &q.refsIns, &q.claimGet, &q.claimIns, &q.claimsDel, &q.tokenIns,
		&q.principalGet, &q.principalPut, &q.principalDel, &q.auth, &q.authGet, &q.accountByName, &q.accountIns,
		&q.accountsAny, &q.principalIns, &q.accountGet, &q.secretIns, &q.secretGet, &q.children, &q.parentLocked} {
		*p = d.rebind(*p)
	}
	return q
}

// reads are the queries that run on the read pool.
func (q *queries) reads() []string {
	return []string{q.get, q.getParent, q.list, q.listChild, q.auth, q.authGet, q.accountsAny, q.principalGet, q.claimGet}
}

// writes are the queries that run inside write transactions.
func (q *queries) writes() []string {
	return []string{q.get, q.getLocked, q.refTarget, q.getParent, q.insert, q.update, q.del,
		q.restricted, q.cascade, q.refsDel, q.refsIns, q.claimGet, q.claimIns, q.claimsDel, q.tokenIns,
		q.principalGet, q.principalPut, q.principalDel, q.accountByName, q.accountIns, q.principalIns,
		q.accountGet, q.secretIns, q.secretGet, q.children}
}

// row is one stored object as read before decoding.
type row struct {
	doc     []byte
	parent  sql.NullString
	version int64
}

// load reads one object of the account. For a nested collection the object must belong to
// parentID, unless anyParent is set.
func (s *Store) load(ctx context.Context, q querier, account string, res *ep.Resource, parentID, id string, anyParent bool) (ep.Document, row, error) {
	return s.loadWith(ctx, q, s.q.get, account, res, parentID, id, anyParent)
}

func (s *Store) loadWith(ctx context.Context, q querier, query, account string, res *ep.Resource, parentID, id string, anyParent bool) (ep.Document, row, error) {
	r, err := s.loadRow(ctx, q, query, account, res, parentID, id, anyParent)
	if err != nil {
		return nil, r, err
	}
	doc, err := decode(res, r.doc)
	return doc, r, err
}

// loadRow is load without the decoding.
func (s *Store) loadRow(ctx context.Context, q querier, query, account string, res *ep.Resource, parentID, id string, anyParent bool) (row, error) {
	var r row
	if !storable(id) || !storable(parentID) {
		return r, ep.NotFound()
	}
	err := q.QueryRowContext(ctx, query, id, account, res.Kind).Scan(&r.doc, &r.parent, &r.version)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && res.Parent != nil && !anyParent && r.parent.String != parentID) {
		return r, ep.NotFound()
	}
	if err != nil {
		return r, s.classify(err)
	}
	return r, nil
}

func decode(res *ep.Resource, body []byte) (ep.Document, error) {
	doc := res.New()
	if err := json.Unmarshal(body, doc); err != nil {
		return nil, fmt.Errorf("store: corrupt %s document: %w", res.Kind, err)
	}
	return doc, nil
}

// Get returns the object of collection res with the id in the account; for a nested collection it
// must also belong to parentID. Another account's object is not found, exactly like a missing one.
func (s *Store) Get(ctx context.Context, account string, res *ep.Resource, parentID, id string) (ep.Document, error) {
	doc, _, err := s.load(ctx, s.rd, account, res, parentID, id, false)
	if err != nil {
		return nil, err
	}
	return doc, s.complete(ctx, account, res, doc)
}

// List returns up to limit objects of the collection, newest first, with ids below beforeID when
// it is not empty, and whether more objects follow.
func (s *Store) List(ctx context.Context, account string, res *ep.Resource, parentID, beforeID string, limit int) ([]ep.Document, bool, error) {
	if beforeID == "" {
		beforeID = "\x7f" // above every id: ids are printable ASCII
	}
	var (
		rows *sql.Rows
		err  error
	)
	if res.Parent != nil {
		if _, _, err := s.load(ctx, s.rd, account, res.Parent, "", parentID, false); err != nil {
			return nil, false, err
		}
		rows, err = s.rd.QueryContext(ctx, s.q.listChild, parentID, account, res.Kind, beforeID, limit+1)
	} else {
		rows, err = s.rd.QueryContext(ctx, s.q.list, account, res.Kind, beforeID, limit+1)
	}
	if err != nil {
		return nil, false, s.classify(err)
	}
	defer rows.Close()
	docs := make([]ep.Document, 0, limit)
	var sizes []int // of the stored documents, for boundPage
	more := false
	for rows.Next() {
		if len(docs) == limit {
			more = true
			break
		}
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, false, s.classify(err)
		}
		doc, err := decode(res, body)
		if err != nil {
			return nil, false, err
		}
		docs = append(docs, doc)
		sizes = append(sizes, len(body))
	}
	if err := rows.Err(); err != nil {
		return nil, false, s.classify(err)
	}
	rows.Close()
	if docs, more, err = s.boundPage(ctx, res, docs, sizes, more); err != nil {
		return nil, false, err
	}
	return docs, more, s.complete(ctx, account, res, docs...)
}

// Create builds a new object with c inside a write transaction and stores it with its token hash,
// references and claims. The returned document shows the token, if one was issued, once.
func (s *Store) Create(ctx context.Context, caller ep.Caller, res *ep.Resource, parentID string, c ep.Creator) (ep.Document, error) {
	var (
		doc   ep.Document
		token string
	)
	// The id and its time are made before the transaction, off the committer's serial path; an
	// id that is never committed is simply not used.
	id, created := ep.NewID(res.Prefix)
	createdAt := ep.FormatTime(created)
	var err error
	defer func() { s.committed(caller.AccountID, res, err) }()
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		view := &txView{s: s, ctx: ctx, tx: tx, account: caller.AccountID}
		if res.Parent != nil {
			if _, err := view.row(res.Parent, parentID); err != nil {
				return err
			}
		}
		op := &ep.Op{Ctx: ctx, Caller: caller, Tx: view, ID: id, Created: created, ParentID: parentID, Settings: s.Settings()}
		d, err := c.Create(op)
		if err != nil {
			return err
		}
		m := d.Base()
		m.ID, m.CreatedAt = id, createdAt
		parent := parentID
		if ch, ok := d.(ep.Child); ok {
			parent = ch.ParentID()
		}
		if err := s.sealFields(res, d); err != nil {
			return err
		}
		body, err := storedJSON(d)
		if err != nil {
			return err
		}
		refs, claims := refsOf(d), claimsOf(d)
		use, hasPolicy := policyUseOf(d, id)
		if hasPolicy {
			if err := s.checkPolicyBudget(ctx, tx, caller.AccountID, id, use); err != nil {
				return err
			}
		}
		exec := tx.ExecContext
		if op.Token == nil && op.Secret == "" && len(refs) == 0 && len(claims) == 0 && !hasPolicy {
			exec = tx.ExecLast // the row is all there is to write
		}
		if _, err := exec(ctx, s.q.insert, id, caller.AccountID, res.Kind, nullable(parent), m.CreatedAt, body); err != nil {
			return s.classify(err)
		}
		if op.Token != nil {
			if _, err := tx.ExecContext(ctx, s.q.tokenIns, op.Token.Selector, hex.EncodeToString(op.Token.Hash),
				res.Kind, caller.AccountID, id, op.TokenOwner); err != nil {
				return s.classify(err)
			}
			token = op.Token.Plain
		}
		if op.Secret != "" {
			if err := s.putSecret(ctx, tx, caller.AccountID, id, op.Secret); err != nil {
				return err
			}
		}
		if err := s.writeRefs(ctx, tx, caller.AccountID, id, refs, false); err != nil {
			return err
		}
		if err := s.writeClaims(ctx, tx, caller.AccountID, id, d, false); err != nil {
			return err
		}
		if err := s.writePolicyUse(ctx, tx, caller.AccountID, id, use, hasPolicy, false); err != nil {
			return err
		}
		doc = d
		return nil
	})
	if err != nil {
		return nil, err
	}
	if th, ok := doc.(ep.TokenHolder); ok && token != "" {
		th.SetToken(token)
	}
	return doc, s.complete(ctx, caller.AccountID, res, doc)
}

// Update applies fn to the current document and writes it back if nobody else wrote it in the
// meantime (compare-and-swap on the version); otherwise it reads again and reapplies fn.
func (s *Store) Update(ctx context.Context, caller ep.Caller, res *ep.Resource, parentID, id string, fn func(op *ep.Op, doc ep.Document) error) (ep.Document, error) {
	var doc ep.Document
	var err error
	defer func() { s.committed(caller.AccountID, res, err) }()
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		// The read takes the row lock where the engine has one, so concurrent writers of one hot
		// object queue instead of failing the version check over and over; the version check
		// still guards every write.
		if err := s.takeTurns(ctx, tx, caller.AccountID, res); err != nil {
			return err
		}
		d, r, err := s.loadWith(ctx, tx, s.q.getLocked, caller.AccountID, res, parentID, id, false)
		if err != nil {
			return err
		}
		view := &txView{s: s, ctx: ctx, tx: tx, account: caller.AccountID}
		op := &ep.Op{Ctx: ctx, Caller: caller, Tx: view, ID: id, ParentID: parentID, Settings: s.Settings()}
		refsBefore, claimsBefore := refsOf(d), claimsOf(d)
		useBefore, hadPolicy := policyUseOf(d, id)
		// fn sees the document's secrets opened (a module PUT may keep a stored client secret)
		// and they are sealed again, whatever it set, before the write (docsecrets.go).
		if err := s.openFields(res, d); err != nil {
			return err
		}
		if err := fn(op, d); err != nil {
			return err
		}
		use, hasPolicy := policyUseOf(d, id)
		policyChanged := hadPolicy != hasPolicy || useBefore != use
		if hasPolicy && policyChanged {
			if err := s.checkPolicyBudget(ctx, tx, caller.AccountID, id, use); err != nil {
				return err
			}
		}
		if err := s.sealFields(res, d); err != nil {
			return err
		}
		body, err := storedJSON(d)
		if err != nil {
			return err
		}
		out, err := tx.ExecContext(ctx, s.q.update, body, id, r.version)
		if err != nil {
			return s.classify(err)
		}
		if n, err := out.RowsAffected(); err != nil {
			return s.classify(err)
		} else if n == 0 {
			return errRetry
		}
		if op.Secret != "" { // a new secret of the object (a route's SAML signing key)
			if err := s.replaceSecret(ctx, tx, caller.AccountID, id, op.Secret); err != nil {
				return err
			}
		}
		if refs := refsOf(d); !slices.EqualFunc(refs, refsBefore, sameReference) {
			if err := s.writeRefs(ctx, tx, caller.AccountID, id, refs, true); err != nil {
				return err
			}
		}
		if !slices.Equal(claimsOf(d), claimsBefore) {
			if err := s.writeClaims(ctx, tx, caller.AccountID, id, d, true); err != nil {
				return err
			}
		}
		if policyChanged {
			if err := s.writePolicyUse(ctx, tx, caller.AccountID, id, use, hasPolicy, true); err != nil {
				return err
			}
		}
		doc = d
		return nil
	})
	if err != nil {
		return nil, err
	}
	return doc, s.complete(ctx, caller.AccountID, res, doc)
}

// Delete removes the object, unless another object references it with RefRestrict. Objects that
// reference it with RefCascade, and its children, go with it. When the referrers are more than
// CascadeChunk, the object is hidden first and they go in chunks, each in a transaction of its
// own (cascade.go); Delete returns once all of it is gone.
func (s *Store) Delete(ctx context.Context, caller ep.Caller, res *ep.Resource, parentID, id string) (err error) {
	defer func() { s.committed(caller.AccountID, res, err) }()
	var (
		removed int64 // objects the transaction removes
		hidden  bool  // it hid the object instead: the rest goes in chunks
	)
	defer func() {
		if err == nil {
			s.deletes.deletes.Add(1)
			s.deletes.tx(removed)
		}
	}()
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		removed, hidden = 0, false
		d, _, err := s.loadWith(ctx, tx, s.q.getLocked, caller.AccountID, res, parentID, id, false)
		if err != nil {
			return err
		}
		var by string
		err = tx.QueryRowContext(ctx, s.q.restricted, id).Scan(&by)
		switch {
		case err == nil:
			if res.InUse != nil {
				return res.InUse(id)
			}
			return fmt.Errorf("store: %s %s is referenced by %s but its collection declares no InUse error", res.Kind, id, by)
		case !errors.Is(err, sql.ErrNoRows):
			return s.classify(err)
		}
		refs, children, err := s.cascadeSize(ctx, tx, id)
		if err != nil {
			return err
		}
		if refs > CascadeChunk {
			hidden = true
			return s.hide(ctx, tx, caller.AccountID, res, id)
		}
		if refs > 0 {
			if refs, err = s.deleteReferrers(ctx, tx, id, CascadeChunk); err != nil {
				return err
			}
		}
		if res.OnDelete != nil {
			view := &txView{s: s, ctx: ctx, tx: tx, account: caller.AccountID}
			if err := res.OnDelete(&ep.Op{Ctx: ctx, Caller: caller, Tx: view, ID: id, ParentID: parentID, Settings: s.Settings()}, d); err != nil {
				return err
			}
		}
		removed = refs + children + 1
		_, err = tx.ExecContext(ctx, s.q.del, id)
		return s.classify(err)
	})
	if err != nil || !hidden {
		return err
	}
	s.deletes.chunked.Add(1)
	return s.finishDelete(ctx, caller, res, id)
}

// storedJSON is the document as written: without embedded children, which are stored as
// objects of their own.
func storedJSON(d ep.Document) ([]byte, error) {
	if e, ok := d.(ep.Embedder); ok {
		d = e.StoredForm()
	}
	return json.Marshal(d)
}

// embed loads the children of documents of a collection that embeds another (routes in HTTPS
// edges), oldest first, with one query for all of them.
func (s *Store) embed(ctx context.Context, res *ep.Resource, docs ...ep.Document) error {
	if res.Embeds == nil || len(docs) == 0 {
		return nil
	}
	byParent := make(map[string][]ep.Document, len(docs))
	args := make([]any, 0, len(docs)+1)
	args = append(args, res.Embeds.Kind)
	for _, d := range docs {
		args = append(args, d.Base().ID)
	}
	q := s.d.rebind(`SELECT doc, parent_id FROM objects WHERE kind = ? AND parent_id IN (?` +
		strings.Repeat(", ?", len(docs)-1) + `) ORDER BY id`)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return s.classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			body   []byte
			parent string
		)
		if err := rows.Scan(&body, &parent); err != nil {
			return s.classify(err)
		}
		child, err := decode(res.Embeds, body)
		if err != nil {
			return err
		}
		byParent[parent] = append(byParent[parent], child)
	}
	if err := rows.Err(); err != nil {
		return s.classify(err)
	}
	for _, d := range docs {
		children := byParent[d.Base().ID]
		if children == nil {
			children = []ep.Document{}
		}
		d.(ep.Embedder).SetChildren(children)
	}
	return nil
}

func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
