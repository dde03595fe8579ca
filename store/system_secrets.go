package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// Deployment-wide secrets (the data plane's CA, the sign-in sessions' key, the ACME account key),
// shared by every replica of one database and minted once by whichever starts first.

// SystemSecret returns the deployment-wide secret called name, minting it with mint when no
// replica has yet. Concurrent first starts agree on one: the loser of the insert reads the
// winner's. The private part is stored encrypted like every other secret.
func (s *Store) SystemSecret(ctx context.Context, name string, mint func() (public, private string, err error)) (public, private string, err error) {
	public, sealed, err := s.systemSecretRow(ctx, name)
	if err == nil {
		private, err = s.seal.open("system:"+name, sealed)
		return public, private, err
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", "", err
	}
	pub, priv, err := mint()
	if err != nil {
		return "", "", err
	}
	sealed, err = s.seal.seal("system:"+name, priv)
	if err != nil {
		return "", "", err
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO system_secrets (name, public, sealed, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO NOTHING`), name, pub, sealed, ep.FormatTime(time.Now()))
		return s.classify(err)
	})
	if err != nil {
		return "", "", err
	}
	public, sealed, err = s.systemSecretRow(ctx, name)
	if err != nil {
		return "", "", err
	}
	private, err = s.seal.open("system:"+name, sealed)
	return public, private, err
}

// SystemPublic returns the public part of a deployment-wide secret, or "" when none was made.
func (s *Store) SystemPublic(ctx context.Context, name string) (string, error) {
	public, _, err := s.systemSecretRow(ctx, name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return public, err
}

func (s *Store) systemSecretRow(ctx context.Context, name string) (public, sealed string, err error) {
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT public, sealed FROM system_secrets WHERE name = ?`), name).Scan(&public, &sealed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		err = s.classify(err)
	}
	return public, sealed, err
}
