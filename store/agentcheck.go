package store

import (
	"context"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// What the agent gateway re-reads of the objects its online sessions depend on, so that a change
// made through any replica's API reaches them: credentials (deleted, owner deactivated, ACL
// narrowed) and who holds the names its tunnels serve.

// CredentialState is a credential as an online session depends on it.
type CredentialState struct {
	// Active is false when the credential's owner is a deactivated bot user.
	Active bool
	ACL    []string
}

// CredentialStates returns the state of each credential of ids that still exists, with one
// query per 500 ids; a deleted credential is absent from the map.
func (s *Store) CredentialStates(ctx context.Context, ids []string) (map[string]CredentialState, error) {
	out := make(map[string]CredentialState, len(ids))
	err := inChunks(ids, func(chunk []any) error {
		q := `SELECT o.id, o.doc, p.active FROM objects o JOIN tokens t ON t.object_id = o.id
			JOIN principals p ON p.id = t.principal_id
			WHERE o.kind = ? AND o.id IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		rows, err := s.r.QueryContext(ctx, s.d.rebind(q), append([]any{ep.Credentials.Kind}, chunk...)...)
		if err != nil {
			return s.classify(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var body []byte
			var active int
			if err := rows.Scan(&id, &body, &active); err != nil {
				return s.classify(err)
			}
			d, err := decode(ep.Credentials, body)
			if err != nil {
				return err
			}
			out[id] = CredentialState{Active: active != 0, ACL: d.(*ep.Credential).ACL}
		}
		return s.classify(rows.Err())
	})
	return out, err
}

// ClaimHolders returns the account holding each claimed value of namespace among values (a
// value nobody holds is absent), with one query per 500 values.
func (s *Store) ClaimHolders(ctx context.Context, namespace string, values []string) (map[string]string, error) {
	out := make(map[string]string, len(values))
	var keep []string
	for _, v := range values {
		if storable(v) {
			keep = append(keep, v)
		}
	}
	err := inChunks(keep, func(chunk []any) error {
		q := `SELECT value, account_id FROM claims WHERE namespace = ? AND value IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		rows, err := s.r.QueryContext(ctx, s.d.rebind(q), append([]any{namespace}, chunk...)...)
		if err != nil {
			return s.classify(err)
		}
		defer rows.Close()
		for rows.Next() {
			var value, account string
			if err := rows.Scan(&value, &account); err != nil {
				return s.classify(err)
			}
			out[value] = account
		}
		return s.classify(rows.Err())
	})
	return out, err
}

// inChunks calls f with the values in chunks of at most 500, as query arguments.
func inChunks(values []string, f func(chunk []any) error) error {
	for len(values) > 0 {
		n := min(len(values), 500)
		chunk := make([]any, n)
		for i, v := range values[:n] {
			chunk[i] = v
		}
		values = values[n:]
		if err := f(chunk); err != nil {
			return err
		}
	}
	return nil
}
