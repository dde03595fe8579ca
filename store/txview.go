package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	ep "github.com/edgeplane/edgeplane"
)

// txView is ep.Tx: the store as a document's rules see it inside a write transaction.
type txView struct {
	s       *Store
	ctx     context.Context
	tx      *wtx
	account string
}

func (v *txView) Get(res *ep.Resource, id string) (ep.Document, error) {
	body, err := v.row(res, id)
	if err != nil {
		return nil, err
	}
	return decode(res, body)
}

// Exists is Get without the document, which it does not decode.
func (v *txView) Exists(res *ep.Resource, id string) (bool, error) {
	_, err := v.row(res, id)
	if ep.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// row reads the stored document of an object of the account, whatever its parent, from the read
// cache when the transaction may (writeSet.cached), else from the database, filling the cache.
func (v *txView) row(res *ep.Resource, id string) ([]byte, error) {
	if o, ok := v.tx.ws.cached(id); ok {
		if o.account != v.account || o.kind != res.Kind {
			return nil, ep.NotFound()
		}
		return o.doc, nil
	}
	r, err := v.s.loadRow(v.ctx, v.tx, v.s.q.get, v.account, res, "", id, true)
	if err != nil {
		return nil, err
	}
	v.tx.ws.fill(id, newCachedObject(v.account, res, r.parent, r.doc))
	return r.doc, nil
}

// Claimed also share-locks the object holding the claim (on PostgreSQL), so that a delete of it
// and a write that relies on it serialise on that one row: the delete then either sees the new
// reference (and refuses) or commits first (and the write finds nothing), never both.
func (v *txView) Claimed(namespace, value string) (string, bool, error) {
	var account, id string
	if !storable(value) {
		return "", false, ep.NotFound()
	}
	err := v.tx.QueryRowContext(v.ctx, v.s.q.claimGet, namespace, value).Scan(&account, &id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, ep.NotFound()
	}
	if err != nil {
		return "", false, v.s.classify(err)
	}
	if account == v.account {
		var locked string
		err := v.tx.QueryRowContext(v.ctx, v.s.q.refTarget, id).Scan(&locked)
		if errors.Is(err, sql.ErrNoRows) {
			return "", false, ep.NotFound() // deleted while we looked
		}
		if err != nil {
			return "", false, v.s.classify(err)
		}
	}
	return id, account == v.account, nil
}

// storable reports whether s can be a key in every engine's text columns: valid UTF-8 without
// NUL. Anything else names no object (PostgreSQL would fail the query rather than find nothing).
func storable(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

func (v *txView) Principal(id string) (ep.Principal, error) {
	return v.s.principal(v.ctx, v.tx, v.account, id)
}

func (v *txView) PutPrincipal(p ep.Principal) error {
	_, err := v.tx.ExecContext(v.ctx, v.s.q.principalPut, p.ID, v.account, string(p.Role), boolInt(p.Active), ep.FormatTime(time.Now()))
	return v.s.classify(err)
}

func (v *txView) DeletePrincipal(id string) error {
	_, err := v.tx.ExecContext(v.ctx, v.s.q.principalDel, id, v.account)
	return v.s.classify(err)
}
