package certmgr_test

// What the certificate manager's tests share: a real store (SQLite, and PostgreSQL when
// EDGEPLANE_TEST_POSTGRES is set), a real Pebble (internal/pebbletest) whose validation
// authority reaches an HTTP-01 challenge listener of the test that answers from the store, as
// serve's public listener does, and a manager run as serve runs it.

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/internal/pebbletest"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// wait is how long a test waits for a state it expects: long, so that a loaded machine does not
// fail a test that would pass, and only spent in full when something is wrong.
const wait = 60 * time.Second

// forEngines runs fn once per database engine of the run, each on a fresh database.
func forEngines(t *testing.T, fn func(t *testing.T, st *store.Store)) {
	t.Parallel()
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			st, err := store.Open(context.Background(), testdb.Fresh(t, engine))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			fn(t, st)
		})
	}
}

// env is one test's world: a store with an account, and the challenge listener's port.
type env struct {
	t        *testing.T
	st       *store.Store
	caller   ep.Caller
	httpPort int
	log      *logBuffer
}

// newEnv makes the test's account and starts the HTTP-01 challenge listener (give its port to
// Pebble as HTTPPort).
func newEnv(t *testing.T, st *store.Store) *env {
	t.Helper()
	caller, _, err := st.EnsureAccount(context.Background(), "certmgr-test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	answers := certmgr.Answers{Store: st}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.URL.Path, "/.well-known/acme-challenge/")
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		keyAuth, found := answers.HTTP01(host, token)
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(keyAuth))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	e := &env{t: t, st: st, caller: caller, httpPort: ln.Addr().(*net.TCPAddr).Port, log: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("certificate manager log:\n%s", e.log.String())
		}
	})
	return e
}

// pebble starts a Pebble that validates HTTP-01 on the test's challenge listener.
func (e *env) pebble(o pebbletest.Options) *pebbletest.Pebble {
	e.t.Helper()
	o.HTTPPort, o.TLSPort = e.httpPort, pebbletest.FreePort(e.t)
	return pebbletest.Start(e.t, o)
}

// manager starts a certificate manager on the test's store with cfg (the store, replica name,
// challenge type and logger filled in), stopped when the test ends.
func (e *env) manager(cfg certmgr.Config) *certmgr.Manager {
	e.t.Helper()
	cfg.Store, cfg.Challenge, cfg.Logger = e.st, certmgr.HTTP01, slog.New(slog.NewTextHandler(e.log, nil))
	if cfg.Replica == "" {
		cfg.Replica = "replica-under-test"
	}
	m := certmgr.New(cfg)
	m.Start()
	e.t.Cleanup(m.Close)
	return m
}

// reserve reserves host with a certificate management policy of keyType and returns its id.
func (e *env) reserve(host, keyType string) string {
	e.t.Helper()
	body := &ep.ReservedDomainCreate{Domain: &host, CertificateManagementPolicy: &ep.CertPolicyFields{PrivateKeyType: &keyType}}
	if err := body.Validate(); err != nil {
		e.t.Fatal(err)
	}
	d, err := e.st.Create(context.Background(), e.caller, ep.ReservedDomains, "", body)
	if err != nil {
		e.t.Fatal(err)
	}
	return d.Base().ID
}

// domain reads the reserved domain id.
func (e *env) domain(id string) *ep.ReservedDomain {
	e.t.Helper()
	d, err := e.st.Get(context.Background(), e.caller.AccountID, ep.ReservedDomains, "", id)
	if err != nil {
		e.t.Fatal(err)
	}
	return d.(*ep.ReservedDomain)
}

// waitDomain polls the domain until cond holds, failing the test after wait; it returns the
// domain.
func (e *env) waitDomain(id, what string, cond func(d *ep.ReservedDomain) bool) *ep.ReservedDomain {
	e.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		d := e.domain(id)
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("domain %s: not %s within %v; status: %s", d.Domain, what, wait, statusString(d))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// failing is the condition "the job fails with code".
func failing(code string) func(d *ep.ReservedDomain) bool {
	return func(d *ep.ReservedDomain) bool {
		j := job(d)
		return j != nil && j.ErrorCode != nil && *j.ErrorCode == code
	}
}

// certified is the condition "a certificate was issued and installed".
func certified(d *ep.ReservedDomain) bool {
	return d.Certificate != nil && d.CertificateManagementStatus != nil && d.CertificateManagementStatus.ProvisioningJob == nil
}

// job returns the domain's provisioning job, or nil.
func job(d *ep.ReservedDomain) *ep.CertJob {
	if d.CertificateManagementStatus == nil {
		return nil
	}
	return d.CertificateManagementStatus.ProvisioningJob
}

// lease returns the lease row of the domain's job, and whether there is one.
func (e *env) lease(id string) (store.ACMELease, bool) {
	e.t.Helper()
	leases, err := e.st.ACMELeases(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, l := range leases {
		if l.DomainID == id {
			return l, true
		}
	}
	return store.ACMELease{}, false
}

// waitNoLease waits until the domain's job row is gone: the manager deletes it right after it
// installs the certificate, so a test that saw the domain certified may still find it for a
// moment.
func (e *env) waitNoLease(id, what string) {
	e.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		l, ok := e.lease(id)
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the job row of %s is left after issuance: %+v", what, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statusString(d *ep.ReservedDomain) string {
	st := d.CertificateManagementStatus
	if st == nil {
		return "no status"
	}
	var b strings.Builder
	if st.RenewsAt != nil {
		b.WriteString("renews_at=" + *st.RenewsAt + " ")
	}
	if j := st.ProvisioningJob; j != nil {
		if j.ErrorCode != nil {
			b.WriteString("error_code=" + *j.ErrorCode + " ")
		}
		if j.RetriesAt != nil {
			b.WriteString("retries_at=" + *j.RetriesAt + " ")
		}
		b.WriteString("msg=" + j.Msg)
	}
	return b.String()
}

// logBuffer keeps the manager's log for a failing test's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
