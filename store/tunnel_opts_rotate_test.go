package store

import (
	"context"
	"encoding/json"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestRotateResealsTunnelOptions: `secrets rotate` re-encrypts the sealed options of live agent
// tunnels as well, so that after the old key is retired another replica can still open a bind's
// modules (its basic-auth passwords, client secrets) and route to it; account B's row is
// rewritten under the new key as A's is, and neither is opened under the other's id.
func TestRotateResealsTunnelOptions(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		ctx := context.Background()
		oldKey, newKey := NewSecretKey(), NewSecretKey()
		open := func(keys string) *Store {
			t.Helper()
			st, err := OpenWith(ctx, dsn, Options{SecretKeys: keys})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		secrets := map[string]string{
			"a": `{"BasicAuth":{"credentials":[{"username":"u","cleartext_password":"pw-of-a"}]}}`,
			"b": `{"BasicAuth":{"credentials":[{"username":"u","cleartext_password":"pw-of-b"}]}}`,
		}
		st := open(oldKey)
		for _, acct := range []string{"a", "b"} {
			c, _, err := st.EnsureAccount(ctx, acct)
			if err != nil {
				t.Fatal(err)
			}
			sess, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: "ts_" + acct}})
			if _, err := st.PutAgentSession(ctx, AgentSessionRow{ID: "ts_" + acct, AccountID: c.AccountID, CredentialID: "cr_" + acct,
				Replica: "rep_a", Conn: "conn_" + acct, Doc: sess}); err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: "tn_" + acct}})
			if err := st.PutAgentTunnel(ctx, AgentTunnelRow{ID: "tn_" + acct, SessionID: "ts_" + acct, AccountID: c.AccountID,
				Name: acct + ".edgeplane.app", Doc: body, Proto: "https", Opts: json.RawMessage(secrets[acct])}); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()

		st = open(newKey + "," + oldKey)
		if n, err := st.RotateSecrets(ctx); err != nil || n < 2 {
			t.Fatalf("RotateSecrets NEW,OLD: %d %v, want the two tunnels' options among them", n, err)
		}
		st.Close()

		st = open(newKey)
		defer st.Close()
		rows, err := st.ReplicaTunnels(ctx, "rep_a", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 {
			t.Fatalf("rows: %+v, want the two tunnels", rows)
		}
		for _, r := range rows {
			acct := r.ID[len("tn_"):]
			if r.OptsErr != nil || string(r.Opts) != secrets[acct] {
				t.Errorf("%s under the new key alone: opts %q, error %v", r.ID, r.Opts, r.OptsErr)
			}
		}
	})
}
