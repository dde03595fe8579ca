package store

import (
	"context"
	"fmt"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// Sessions ended by single logout (migration 0016). The saml module records here the sessions
// an identity provider's LogoutRequest ends; every replica reads what was recorded since it last
// looked (enforce.Revocations keeps them in memory), so a sealed session cookie stops opening on
// all of them. Times are kept to the second.

// RevokeSessions records that the sessions of subject in scope issued at or before at are ended,
// until until, when none of them can be alive any more. Recording the same subject again keeps
// the later of each time.
func (s *Store) RevokeSessions(ctx context.Context, scope, subject string, at, until time.Time) error {
	now := time.Now()
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO session_revocations (scope, subject, revoked_at, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (scope, subject) DO UPDATE SET
				revoked_at = CASE WHEN excluded.revoked_at > session_revocations.revoked_at THEN excluded.revoked_at ELSE session_revocations.revoked_at END,
				expires_at = CASE WHEN excluded.expires_at > session_revocations.expires_at THEN excluded.expires_at ELSE session_revocations.expires_at END`),
			scope, subject, ep.FormatTime(at), ep.FormatTime(until.Add(time.Second-time.Nanosecond)))
		return s.classify(err)
	})
	if err != nil {
		return err
	}
	s.sweepMaybe(ctx, &s.revocationSweep, revocationsTable, revocationsKey, now)
	return nil
}

// SessionRevocations calls fn with each revocation recorded at or after since (to the second)
// that has not expired at now.
func (s *Store) SessionRevocations(ctx context.Context, since, now time.Time, fn func(scope, subject string, at, until time.Time)) error {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT scope, subject, revoked_at, expires_at FROM session_revocations
		WHERE revoked_at >= ? AND expires_at > ?`), ep.FormatTime(since), ep.FormatTime(now))
	if err != nil {
		return s.classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var scope, subject, at, until string
		if err := rows.Scan(&scope, &subject, &at, &until); err != nil {
			return s.classify(err)
		}
		a, err1 := time.Parse(ep.TimeFormat, at)
		u, err2 := time.Parse(ep.TimeFormat, until)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("store: session_revocations of %s: bad times %q, %q", scope, at, until)
		}
		fn(scope, subject, a, u)
	}
	return s.classify(rows.Err())
}
