package certmgr_test

// The certificate manager's error paths and its lease, each with the state, error code and
// message that the spec (ReservedDomainCertJob) and docs/dataplane.md "Managed certificates
// (ACME)" name, against a real Pebble and a real store on every engine of the run.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/internal/pebbletest"
	"github.com/edgeplane/edgeplane/store"
)

// A directory that cannot be read is a temporary failure: INTERNAL_ERROR, retries_at set, a msg
// saying in plain words what went wrong and when edgeplane retries, and the retry made then,
// with a delay that doubles.
func TestDirectoryFailuresAreInternalErrors(t *testing.T) {
	notACME := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<html><body>no such page</body></html>")
	}))
	t.Cleanup(notACME.Close)
	htmlPage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>a web site</body></html>")
	}))
	t.Cleanup(htmlPage.Close)
	cases := []struct{ name, directory, want string }{
		{"unreachable", fmt.Sprintf("https://127.0.0.1:%d/dir", pebbletest.FreePort(t)), "could not be reached"},
		{"not found", notACME.URL + "/dir", "did not answer as an ACME directory (HTTP 404 Not Found)"},
		{"not ACME", htmlPage.URL + "/dir", "did not answer as an ACME directory (its answer is not JSON)"},
	}
	forEngines(t, func(t *testing.T, st *store.Store) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e := newEnv(t, st)
				host := strings.ToLower(strings.ReplaceAll(c.name, " ", "-")) + ".directory.example.com"
				id := e.reserve(host, "ecdsa")
				e.manager(certmgr.Config{Directory: c.directory, RetryBase: time.Second})
				d := e.waitDomain(id, "failing with INTERNAL_ERROR", failing(ep.CertErrorInternal))
				j := job(d)
				if j.RetriesAt == nil || d.Certificate != nil {
					t.Fatalf("failing job without retries_at, or with a certificate: %s", statusString(d))
				}
				first := *j.RetriesAt
				// retries_at is shown in whole seconds, so with a one-second base the first retry
				// may come within milliseconds: the state read may already be a later attempt.
				m := regexp.MustCompile(`failed \(attempt (\d+)\)`).FindStringSubmatch(j.Msg)
				if m == nil {
					t.Fatalf("msg %q does not name the attempt", j.Msg)
				}
				attempt, _ := strconv.Atoi(m[1])
				for _, want := range []string{"Obtaining a certificate for " + host + " failed (attempt " + m[1] + ")", c.directory, c.want, "edgeplane retries at " + first + "."} {
					if !strings.Contains(j.Msg, want) {
						t.Fatalf("msg %q does not say %q", j.Msg, want)
					}
				}
				if strings.ContainsAny(j.Msg, "<\n") {
					t.Fatalf("msg is not plain words: %q", j.Msg)
				}
				// The retry comes at retries_at, and the next delay is twice the first.
				d = e.waitDomain(id, "retried", func(d *ep.ReservedDomain) bool {
					j := job(d)
					return j != nil && j.RetriesAt != nil && strings.Contains(j.Msg, fmt.Sprintf("(attempt %d)", attempt+1))
				})
				again, _ := time.Parse(ep.TimeFormat, *job(d).RetriesAt)
				was, _ := time.Parse(ep.TimeFormat, first)
				if again.Sub(was) < 2*time.Second || *job(d).ErrorCode != ep.CertErrorInternal {
					t.Fatalf("second failure: retries_at %s after a first at %s (want at least 2 s later): %s", *job(d).RetriesAt, first, statusString(d))
				}
			})
		}
	})
}

// A challenge the ACME server cannot reach edgeplane through is DNS_ERROR, not retried, its msg
// naming the host and what to correct; the job's order is forgotten, so that setting the policy
// again starts a new one.
func TestUnreachableChallengeIsDNSError(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.pebble(pebbletest.Options{})
		host := "unreachable.example.com"
		pb.SetA(t, host, "127.0.0.2") // nothing listens there on the challenge port
		id := e.reserve(host, "rsa")
		m := e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots, RetryBase: time.Second})
		d := e.waitDomain(id, "failing with DNS_ERROR", failing(ep.CertErrorDNS))
		j := job(d)
		if j.RetriesAt != nil || d.Certificate != nil {
			t.Fatalf("DNS_ERROR with a retry or a certificate: %s", statusString(d))
		}
		for _, want := range []string{"could not validate " + host + " through edgeplane", "resolves to this edgeplane server", "set the certificate_management_policy again"} {
			if !strings.Contains(j.Msg, want) {
				t.Fatalf("msg %q does not say %q", j.Msg, want)
			}
		}
		m.Close() // its lease released; the job row keeps no order and no failed attempts
		l, ok := e.lease(id)
		if !ok || l.Holder != "" {
			t.Fatalf("lease after the failure: %+v (row %v), want a released lease", l, ok)
		}
		stored, took, err := st.AcquireACMELease(context.Background(), e.caller.AccountID, id, host, "inspector", time.Minute)
		if err != nil || !took || stored.OrderURL != "" || stored.Attempts != 0 {
			t.Fatalf("job after DNS_ERROR: %+v (acquired %v, %v), want no order and no attempts", stored, took, err)
		}
	})
}

// An ACME server that refuses the name (Pebble's blocklist: rejectedIdentifier on the new
// order) is DNS_ERROR: only the user can change the name; msg quotes the server's reason.
func TestRefusedOrderIsDNSError(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		host := "refused.example.com"
		pb := e.pebble(pebbletest.Options{Blocklist: []string{host}})
		id := e.reserve(host, "ecdsa")
		e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots, RetryBase: time.Second})
		d := e.waitDomain(id, "failing with DNS_ERROR", failing(ep.CertErrorDNS))
		j := job(d)
		if j.RetriesAt != nil || d.Certificate != nil {
			t.Fatalf("DNS_ERROR with a retry or a certificate: %s", statusString(d))
		}
		if !strings.Contains(j.Msg, "The ACME server refuses to issue a certificate for "+host) || !strings.Contains(j.Msg, host+" (") {
			t.Fatalf("msg %q does not say that the ACME server refuses %s and why", j.Msg, host)
		}
	})
}

// With issuance disabled (Directory ""), the job says so, with no error code and no retry, and
// no job is started.
func TestDisabledIssuanceSaysSo(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		id := e.reserve("off.example.com", "rsa")
		e.manager(certmgr.Config{Directory: ""})
		d := e.waitDomain(id, "saying issuance is disabled", func(d *ep.ReservedDomain) bool {
			j := job(d)
			return j != nil && strings.Contains(j.Msg, "issuance is disabled")
		})
		j := job(d)
		if j.ErrorCode != nil || j.RetriesAt != nil || !strings.Contains(j.Msg, "--acme-directory is empty") || d.Certificate != nil {
			t.Fatalf("disabled job: %s", statusString(d))
		}
		if l, ok := e.lease(id); ok {
			t.Fatalf("a job was started with issuance disabled: %+v", l)
		}
	})
}

// A job whose lease another replica holds is not taken before the lease ends (here the other
// replica never renews it, as when it died), and is taken over and completed after: the
// certificate is issued and the job row is gone.
func TestLeaseHeldElsewhereIsTakenOnlyAfterExpiry(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.pebble(pebbletest.Options{})
		host := "leased.example.com"
		id := e.reserve(host, "rsa")
		ctx := context.Background()
		if _, ok, err := st.AcquireACMELease(ctx, e.caller.AccountID, id, host, "other-replica", 4*time.Second); err != nil || !ok {
			t.Fatalf("other replica's lease: %v %v", ok, err)
		}
		held, _ := e.lease(id)
		e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots})
		// Every look that ends before the lease does finds it with the other replica and the job
		// untouched; the manager scans meanwhile (it started with the domain due).
		looks := 0
		for {
			l, _ := e.lease(id)
			d := e.domain(id)
			if !time.Now().Before(held.Until) {
				break
			}
			looks++
			if l.Holder != "other-replica" || job(d) == nil || strings.HasPrefix(job(d).Msg, "Ordering") || d.Certificate != nil {
				t.Fatalf("the job was taken before the lease ended (%v): lease %+v, %s", held.Until, l, statusString(d))
			}
			time.Sleep(200 * time.Millisecond)
		}
		d := e.waitDomain(id, "certified after the lease ended", certified)
		if looks == 0 {
			t.Log("the lease ended before the first look (a slow machine): only the takeover was checked")
		}
		c, err := st.Get(ctx, e.caller.AccountID, ep.TLSCertificates, "", d.Certificate.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cert := c.(*ep.TLSCertificate); cert.IssuedAt == nil || !strings.Contains(fmt.Sprint(cert.SubjectAlternativeNames), host) {
			t.Fatalf("issued certificate: %+v", cert)
		}
		if d.CertificateManagementStatus.RenewsAt == nil {
			t.Fatalf("no renews_at after issuance: %s", statusString(d))
		}
		e.waitNoLease(id, host)
	})
}

// A run that starts after the domain was certified (its scan read the domain before another run
// installed the certificate) takes the lease, finds nothing due and leaves no job row behind: a
// certified domain has no job.
func TestLateRunLeavesNoJob(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.pebble(pebbletest.Options{})
		host := "late.example.com"
		id := e.reserve(host, "ecdsa")
		m := e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots})
		d := e.waitDomain(id, "certified", certified)
		e.waitNoLease(id, host)
		// The run that certified the domain releases its lease before it leaves the manager's
		// set of running domains, so the late run waits for that run to end first.
		for deadline := time.Now().Add(wait); !m.RunOnce(store.ManagedDomain{AccountID: e.caller.AccountID, Domain: d}); {
			if time.Now().After(deadline) {
				t.Fatal("the run that certified the domain never ended")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if l, ok := e.lease(id); ok {
			t.Fatalf("a late run left the job row of a certified domain: %+v", l)
		}
		if again := e.domain(id); !certified(again) || again.Certificate.ID != d.Certificate.ID {
			t.Fatalf("a late run changed the certified domain: %s", statusString(again))
		}
	})
}
