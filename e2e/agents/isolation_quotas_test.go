package agents

import (
	"context"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// Bind quotas: one session or one account cannot take every TCP port of the range, nor bind
// without end. Past a quota the bind is refused with ngrok's code and a message naming the
// flag; another account binds as before.

// quotaRefused expects err to be the refusal of a bind past a quota: code, and a message naming
// flag.
func quotaRefused(t *testing.T, what string, err error, code, flag string) {
	t.Helper()
	if ngrokCode(err) != code || !strings.Contains(err.Error(), flag) {
		t.Errorf("%s: %v, want %s naming %s", what, err, code, flag)
	}
}

// mustListen binds opts on sess, failing the test on a refusal.
func mustListen(t *testing.T, what string, sess ngrok.Session, opts config.Tunnel) ngrok.Tunnel {
	t.Helper()
	tun, err := sess.Listen(context.Background(), opts)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return tun
}

// TestBindQuotas: each quota flag, set low, refuses the bind past it, per session with
// ERR_NGROK_324 and per account with ERR_NGROK_5000; a tunnel that goes offline gives its place
// back, and another account still binds the same kind of tunnel.
func TestBindQuotas(t *testing.T) {
	w := start(t, "--tcp-addr-host", "127.0.0.1", "--tcp-port-range", "22000-22999",
		"--agent-max-tcp-ports-per-session", "2", "--agent-max-tcp-ports-per-account", "3",
		"--agent-max-binds-per-session", "4", "--agent-max-binds-per-account", "6",
		"--agent-max-labeled-tunnels-per-session", "2", "--agent-max-labeled-tunnels-per-account", "3",
		"--agent-max-label-bytes", "64")
	session := func(w *world) ngrok.Session {
		_, token := w.credential()
		return w.mustConnect(token)
	}
	tcp := config.TCPEndpoint()
	other := session(w) // account A, beside each account below

	t.Run("tcp ports", func(t *testing.T) {
		b := w.asAccount("ports")
		s1, s2 := session(b), session(b)
		first := mustListen(t, "first port", s1, tcp)
		mustListen(t, "second port", s1, tcp)
		_, err := s1.Listen(context.Background(), tcp)
		quotaRefused(t, "a third port in one session", err, "ERR_NGROK_324", "--agent-max-tcp-ports-per-session")
		mustListen(t, "a third port of the account, in another session", s2, tcp)
		_, err = s2.Listen(context.Background(), tcp)
		quotaRefused(t, "a fourth port of the account", err, "ERR_NGROK_5000", "--agent-max-tcp-ports-per-account")
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		mustListen(t, "a port once another went offline", s2, tcp)
		mustListen(t, "another account's port", other, tcp)
	})

	t.Run("binds", func(t *testing.T) {
		c := w.asAccount("binds")
		s1, s2 := session(c), session(c)
		for _, name := range []string{"q1", "q2", "q3", "q4"} {
			mustListen(t, "bind "+name, s1, config.HTTPEndpoint(config.WithDomain(name+"-binds.edgeplane.app")))
		}
		_, err := s1.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("q5-binds.edgeplane.app")))
		quotaRefused(t, "a fifth bind in one session", err, "ERR_NGROK_324", "--agent-max-binds-per-session")
		mustListen(t, "the account's fifth bind", s2, config.HTTPEndpoint(config.WithDomain("q5-binds.edgeplane.app")))
		mustListen(t, "the account's sixth bind", s2, config.LabeledTunnel(config.WithLabel("edge", "six")))
		_, err = s2.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("q7-binds.edgeplane.app")))
		quotaRefused(t, "the account's seventh bind", err, "ERR_NGROK_5000", "--agent-max-binds-per-account")
		mustListen(t, "another account's bind", other, config.HTTPEndpoint(config.WithDomain("a-binds.edgeplane.app")))
	})

	t.Run("labeled tunnels", func(t *testing.T) {
		d := w.asAccount("labels")
		s1, s2 := session(d), session(d)
		labeled := func(v string) config.Tunnel { return config.LabeledTunnel(config.WithLabel("edge", v)) }
		mustListen(t, "first labeled tunnel", s1, labeled("one"))
		mustListen(t, "second labeled tunnel", s1, labeled("two"))
		_, err := s1.Listen(context.Background(), labeled("three"))
		quotaRefused(t, "a third labeled tunnel in one session", err, "ERR_NGROK_324", "--agent-max-labeled-tunnels-per-session")
		mustListen(t, "the account's third labeled tunnel", s2, labeled("three"))
		_, err = s2.Listen(context.Background(), labeled("four"))
		quotaRefused(t, "the account's fourth labeled tunnel", err, "ERR_NGROK_5000", "--agent-max-labeled-tunnels-per-account")
		_, err = other.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", strings.Repeat("x", 61))))
		quotaRefused(t, "labels of 65 bytes", err, "ERR_NGROK_301", "--agent-max-label-bytes")
		mustListen(t, "another account's labeled tunnel", other, config.LabeledTunnel(config.WithLabel("edge", strings.Repeat("x", 60))))
	})
}

// TestBindQuotaAcrossReplicas: --agent-max-binds-per-account counts the account's tunnels on
// every replica: with a quota of 2, two binds through replica A leave none for the account's
// agent on replica B, until one of them goes offline.
func TestBindQuotaAcrossReplicas(t *testing.T) {
	dsn := testdb.Postgres(t) // skips without EDGEPLANE_TEST_POSTGRES
	env := []string{testdb.SecretKeyEnvVar()}
	a := startOn(t, dsn, env, "", "--agent-max-binds-per-account", "2")
	b := startOn(t, dsn, env, a.token, "--agent-max-binds-per-account", "2")
	_, token := a.credential()
	onA, onB := a.mustConnect(token), b.mustConnect(token)
	first := mustListen(t, "first bind, on A", onA, config.HTTPEndpoint(config.WithDomain("r1-quota.edgeplane.app")))
	mustListen(t, "second bind, on A", onA, config.HTTPEndpoint(config.WithDomain("r2-quota.edgeplane.app")))
	_, err := onB.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("r3-quota.edgeplane.app")))
	quotaRefused(t, "a third bind of the account, on B", err, "ERR_NGROK_5000", "--agent-max-binds-per-account")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	mustListen(t, "a bind on B once one on A went offline", onB, config.HTTPEndpoint(config.WithDomain("r3-quota.edgeplane.app")))
}
