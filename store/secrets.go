package store

import (
	"context"
	"database/sql"
	"errors"

	ep "github.com/edgeplane/edgeplane"
)

// Secrets (the private keys of TLS certificates and SSH certificate authorities) live in the
// "secrets" table, one row per object, beside the object's document and never inside it, so no
// rendering of a document can show one. putSecret and (*txView).Secret are the only code that
// writes or reads the table: encrypting secrets at rest is a change to these two functions.
const (
	secretIns = `INSERT INTO secrets (object_id, account_id, data) VALUES (?, ?, ?)`
	secretGet = `SELECT data FROM secrets WHERE object_id = ? AND account_id = ?`
)

// putSecret keeps the secret of a new object, inside the create transaction.
func (s *Store) putSecret(ctx context.Context, tx *sql.Tx, account, id, secret string) error {
	_, err := tx.ExecContext(ctx, s.d.rebind(secretIns), id, account, secret)
	return s.classify(err)
}

// Secret returns the secret kept with an object of the caller's account.
func (v *txView) Secret(id string) (string, error) {
	var data string
	err := v.tx.QueryRowContext(v.ctx, v.s.d.rebind(secretGet), id, v.account).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ep.NotFound()
	}
	return data, v.s.classify(err)
}

// SetSettings makes the deployment settings (service domains, CNAME zone) available to the rules
// of every later write, through ep.Op.Settings. Call it once after Open, before serving.
func (s *Store) SetSettings(settings ep.Settings) { s.settings.Store(&settings) }

// Settings returns the settings in force: those given to SetSettings, else the defaults.
func (s *Store) Settings() ep.Settings {
	if p := s.settings.Load(); p != nil {
		return *p
	}
	return ep.DefaultSettings()
}
