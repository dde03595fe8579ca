package store

import (
	"database/sql"
	"errors"

	ep "github.com/edgeplane/edgeplane"
)

// ClaimedExclusive is Claimed with the holder's row locked FOR UPDATE on PostgreSQL, whatever its
// account: a reservation of a name under another account's wildcard takes the wildcard's row
// this way, while edges relying on the wildcard share-lock it (Claimed), so the two writes
// serialise on that one row. SQLite has one writer and needs no lock.
func (v *txView) ClaimedExclusive(namespace, value string) (string, bool, error) {
	id, mine, err := v.Claimed(namespace, value)
	if err != nil || v.s.d.forUpdate() == "" {
		return id, mine, err
	}
	var locked string
	err = v.tx.QueryRowContext(v.ctx, v.s.d.rebind(`SELECT id FROM objects WHERE id = ?`+v.s.d.forUpdate()), id).Scan(&locked)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, ep.NotFound() // deleted while we looked
	}
	if err != nil {
		return "", false, v.s.classify(err)
	}
	return id, mine, nil
}
