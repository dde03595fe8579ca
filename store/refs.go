package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// References and claims: the side tables that both engines enforce inside the write's own
// transaction.

func refsOf(d ep.Document) []ep.Reference {
	if r, ok := d.(ep.Referrer); ok {
		return r.References()
	}
	return nil
}

func claimsOf(d ep.Document) []ep.Claim {
	if c, ok := d.(ep.Claimer); ok {
		return c.Claims()
	}
	return nil
}

func (s *Store) writeRefs(ctx context.Context, tx *wtx, account, id string, refs []ep.Reference, replace bool) error {
	if replace {
		if _, err := tx.ExecContext(ctx, s.q.refsDel, id); err != nil {
			return s.classify(err)
		}
	}
	seen := map[string]bool{}
	for _, r := range refs {
		to := r.To
		if r.ToClaim != nil {
			var holderAccount string
			err := tx.QueryRowContext(ctx, s.q.claimGet, r.ToClaim.Namespace, r.ToClaim.Value).Scan(&holderAccount, &to)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && holderAccount != account) {
				continue // nothing of this account holds it: no reference
			}
			if err != nil {
				return s.classify(err)
			}
		}
		if to == "" || seen[to] {
			continue
		}
		seen[to] = true
		var found string
		err := tx.QueryRowContext(ctx, s.q.refTarget, to).Scan(&found)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// Users are not objects; anything else was deleted after the rules looked it up.
			if !strings.HasPrefix(to, ep.UserPrefix+"_") {
				return errRetry
			}
		case err != nil:
			return s.classify(err)
		}
		if _, err := tx.ExecContext(ctx, s.q.refsIns, id, to, int(r.Mode)); err != nil {
			return s.classify(err)
		}
	}
	return nil
}

// sameReference compares references by value.
func sameReference(a, b ep.Reference) bool {
	if a.To != b.To || a.Mode != b.Mode || (a.ToClaim == nil) != (b.ToClaim == nil) {
		return false
	}
	return a.ToClaim == nil || *a.ToClaim == *b.ToClaim
}

// writeClaims takes every claim of the document. A value held by another object is the document's
// conflict error; a concurrent writer taking the same value between the check and the insert
// makes the transaction start over, and the check then reports the conflict.
func (s *Store) writeClaims(ctx context.Context, tx *wtx, account, id string, d ep.Document, replace bool) error {
	claimer, ok := d.(ep.Claimer)
	if !ok {
		return nil
	}
	if replace {
		if _, err := tx.ExecContext(ctx, s.q.claimsDel, id); err != nil {
			return s.classify(err)
		}
	}
	for _, c := range claimer.Claims() {
		var holderAccount, holder string
		err := tx.QueryRowContext(ctx, s.q.claimGet, c.Namespace, c.Value).Scan(&holderAccount, &holder)
		switch {
		case err == nil && holder == id:
			continue
		case err == nil:
			return claimer.Conflict(c, holderAccount == account)
		case !errors.Is(err, sql.ErrNoRows):
			return s.classify(err)
		}
		if _, err := tx.ExecContext(ctx, s.q.claimIns, c.Namespace, c.Value, account, id); err != nil {
			if s.d.uniqueViolation(err) {
				return errRetry
			}
			return s.classify(err)
		}
	}
	return nil
}
