// Package certmgr obtains, stores and renews the managed certificates of reserved domains (a
// domain with a certificate_management_policy) from an ACME directory, with
// golang.org/x/crypto/acme. Each domain's work is a job: one replica at a time holds it (a lease
// row in the store), its order survives restarts, and its progress and failures are written to
// the domain's certificate_management_status. Challenges are answered by every replica's public
// listeners from the store (HTTP-01 on the HTTP listener, TLS-ALPN-01 on the TLS listener), so it
// does not matter which replica the ACME server reaches.
package certmgr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/acme"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// Challenge types edgeplane answers.
const (
	HTTP01    = "http-01"
	TLSALPN01 = "tls-alpn-01"
	// DNS01 is answered by edgeplane's DNS server (package authdns) for wildcard domains, at
	// their acme_challenge_cname_target, whatever Config.Challenge is.
	DNS01 = "dns-01"
)

// Config is what the manager needs.
type Config struct {
	Store Store
	// Directory is the ACME directory URL; "" disables issuance (the status says so).
	Directory string
	// Email is the account's contact, "" for none.
	Email string
	// Roots are the CAs trusted for the directory's HTTPS; nil is the system's.
	Roots *x509.CertPool
	// Replica names this process in the job leases.
	Replica string
	// Challenge is the challenge type answered for single names: HTTP01 or TLSALPN01.
	Challenge string
	// DNS01 says that this replica's DNS server (--dns-listen) answers for the CNAME zone, so
	// wildcard domains get their certificates with DNS-01; without it their job fails with
	// DNS_ERROR naming the flag.
	DNS01 bool
	// Logger receives the jobs' events; nil discards.
	Logger *slog.Logger
	// Poll is the longest time between two scans of the managed domains (default one minute); a
	// write to a reserved domain wakes the manager at once.
	Poll time.Duration
	// Lease is how long a job's lease lasts without renewal (default two minutes): the time after
	// which another replica takes over the job of a replica that died.
	Lease time.Duration
	// RetryBase is the first retry delay after a temporary failure (default one minute),
	// doubled after each further failure up to an hour.
	RetryBase time.Duration
	// Attempt bounds one attempt at obtaining a certificate (default five minutes).
	Attempt time.Duration
}

// testLeaseEnv names the environment variable that shortens the default lease, for tests only.
const testLeaseEnv = "EDGEPLANE_TEST_ACME_LEASE"

// defaultLease is Config.Lease's default: two minutes. The crash takeover test of cmd/edgeplane
// kills a serve process in the middle of a job and has another take the job over once the lease
// ends; it sets EDGEPLANE_TEST_ACME_LEASE (a Go duration, such as "4s") in the processes it
// starts so that this takes seconds. It is no user setting, which is why it is neither a flag nor
// in serve's help: docs/testing.md documents it with the tests.
var defaultLease = leaseFromEnv(os.Getenv(testLeaseEnv))

// leaseFromEnv is the lease that value of EDGEPLANE_TEST_ACME_LEASE asks for, two minutes when it
// is empty or not a positive duration.
func leaseFromEnv(value string) time.Duration {
	if d, err := time.ParseDuration(value); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}

// Manager runs the certificate jobs of this replica.
type Manager struct {
	cfg        Config
	log        *slog.Logger
	httpClient *http.Client
	sub        *store.Subscription
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	mu      sync.Mutex
	acme    *acme.Client
	running map[string]bool
}

// New returns a manager; Start runs it.
func New(cfg Config) *Manager {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Minute
	}
	if cfg.Lease <= 0 {
		cfg.Lease = defaultLease
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = time.Minute
	}
	if cfg.Attempt <= 0 {
		cfg.Attempt = 5 * time.Minute
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, running: map[string]bool{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: cfg.Roots, MinVersion: tls.VersionTLS12}
	m.httpClient = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m
}

// Start runs the scan loop until Close.
func (m *Manager) Start() {
	m.sub = m.cfg.Store.Subscribe()
	m.wg.Add(1)
	go m.loop()
}

// Close stops the jobs, releasing their leases so that a restart takes them up at once, and
// waits for them.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
	if m.sub != nil {
		m.sub.Close()
	}
}

func (m *Manager) lease() time.Duration { return m.cfg.Lease }

// loop scans the managed domains now, after every write to a reserved domain, when the next job
// is due or the next lease another replica holds ends, and at least every Poll.
func (m *Manager) loop() {
	defer m.wg.Done()
	for {
		wait := m.cfg.Poll
		if next := m.scan(); !next.IsZero() {
			wait = min(wait, max(time.Until(next), 50*time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			timer.Stop()
			return
		case <-m.sub.Wake():
			m.sub.Take()
		case <-timer.C:
		}
		timer.Stop()
	}
}

// scan starts the jobs that are due and returns when the next one will be (the zero time when
// none is scheduled).
func (m *Manager) scan() time.Time {
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	domains, err := m.cfg.Store.ManagedDomains(ctx)
	if err != nil {
		if m.ctx.Err() == nil {
			m.log.Warn("certificate manager: reading the managed domains failed", "err", err)
		}
		return time.Now().Add(m.cfg.Poll)
	}
	held := m.forgetJobs(ctx, domains)
	now := time.Now()
	var next time.Time
	later := func(at time.Time) {
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for _, md := range domains {
		d := md.Domain
		if status := m.wildcardStatus(d); status != nil {
			m.report(ctx, md, status)
			continue
		}
		if m.cfg.Directory == "" {
			m.report(ctx, md, disabledStatus)
			continue
		}
		at, due := m.dueAt(d, now)
		if !due {
			later(at)
			continue
		}
		if until, ok := held[d.ID]; ok && now.Before(until.Add(time.Second)) {
			// Another replica holds the job (or held it and died): leave it alone until its lease
			// ends (stored to the second, and taken once that second has passed), then take it
			// over.
			later(until.Add(time.Second))
			continue
		}
		m.mu.Lock()
		busy := m.running[d.ID]
		if !busy {
			m.running[d.ID] = true
		}
		m.mu.Unlock()
		if !busy {
			m.wg.Add(1)
			go m.run(md)
		}
	}
	return next
}

// forgetJobs removes the job rows of domains that no longer have a policy (or no longer exist):
// removing the policy stops the job. It returns when the leases other replicas hold on the
// remaining jobs end.
func (m *Manager) forgetJobs(ctx context.Context, domains []store.ManagedDomain) map[string]time.Time {
	leases, err := m.cfg.Store.ACMELeases(ctx)
	if err != nil || len(leases) == 0 {
		return nil
	}
	managed := map[string]bool{}
	for _, md := range domains {
		managed[md.Domain.ID] = true
	}
	held := map[string]time.Time{}
	for _, l := range leases {
		switch {
		case !managed[l.DomainID]:
			_ = m.cfg.Store.DeleteACMEJob(ctx, l.DomainID)
		case l.Holder != "" && l.Holder != m.cfg.Replica:
			held[l.DomainID] = l.Until
		}
	}
	return held
}

// dueAt is the package's dueAt, except that a wildcard domain's job that failed only because the
// DNS server was off is due at once when it is on: the user has nothing to set again.
func (m *Manager) dueAt(d *ep.ReservedDomain, now time.Time) (time.Time, bool) {
	if m.cfg.DNS01 && waitedForDNS(d) {
		return now, true
	}
	return dueAt(d, now)
}

// dueAt says whether the domain's job should run now, and otherwise when it will (zero: not
// until the user acts). A job without an error runs at once; one failing with INTERNAL_ERROR at
// retries_at; one failing with DNS_ERROR not until the policy is set again. Without a job, the
// certificate is renewed at renews_at.
func dueAt(d *ep.ReservedDomain, now time.Time) (time.Time, bool) {
	st := d.CertificateManagementStatus
	if st == nil {
		return now, true
	}
	if job := st.ProvisioningJob; job != nil {
		switch {
		case job.ErrorCode == nil:
			return now, true
		case *job.ErrorCode == ep.CertErrorInternal && job.RetriesAt != nil:
			at := parseTime(*job.RetriesAt)
			return at, !at.After(now)
		}
		return time.Time{}, false
	}
	if st.RenewsAt == nil {
		return now, true
	}
	at := parseTime(*st.RenewsAt)
	return at, !at.After(now)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(ep.TimeFormat, s)
	return t
}

// disabledStatus is the job shown while issuance is off.
func disabledStatus(job *ep.CertJob) {
	job.ErrorCode, job.RetriesAt = nil, nil
	job.Msg = "Managed certificate issuance is disabled on this edgeplane server (its --acme-directory is empty), " +
		"so no certificate is requested; upload a certificate and set certificate_id to serve TLS for this domain."
}

// wildcardStatus is the job of a wildcard domain that cannot get a certificate here, nil for
// any other domain: wildcard certificates need the DNS-01 challenge, which edgeplane answers at
// the domain's acme_challenge_cname_target when its DNS server is on (Config.DNS01). Without it,
// or for a wildcard under a service domain (which has no such target), the job is DNS_ERROR
// saying what to do.
func (m *Manager) wildcardStatus(d *ep.ReservedDomain) func(*ep.CertJob) {
	if !strings.HasPrefix(d.Domain, "*.") || (m.cfg.DNS01 && d.ACMEChallengeCNAMETarget != nil) {
		return nil
	}
	bare := strings.TrimPrefix(d.Domain, "*.")
	var msg string
	if d.ACMEChallengeCNAMETarget == nil {
		msg = fmt.Sprintf("A wildcard certificate for %s needs the ACME DNS-01 challenge answered at _acme-challenge.%s, in the DNS of a service domain, "+
			"which edgeplane does not serve (the domain has no acme_challenge_cname_target): "+
			"obtain the wildcard certificate elsewhere, upload it and set certificate_id, or reserve the individual names.", d.Domain, bare)
	} else {
		msg = wildcardWithoutDNS(d.Domain, *d.ACMEChallengeCNAMETarget)
	}
	return func(job *ep.CertJob) {
		code := ep.CertErrorDNS
		job.ErrorCode, job.RetriesAt, job.Msg = &code, nil, msg
	}
}

// wildcardWithoutDNS is the msg of a wildcard domain's job while this server's DNS is off.
func wildcardWithoutDNS(domain, target string) string {
	bare := strings.TrimPrefix(domain, "*.")
	return fmt.Sprintf("A wildcard certificate for %s needs the ACME DNS-01 challenge, which this edgeplane server answers only with its DNS server on "+
		"(--dns-listen, which is off): with it, the CNAME record _acme-challenge.%s -> %s leads the ACME server to edgeplane's answer. "+
		"Until then, obtain the wildcard certificate elsewhere, upload it and set certificate_id, "+
		"or reserve the individual names, which edgeplane certifies with HTTP-01 or TLS-ALPN-01.", domain, bare, target)
}

// waitedForDNS reports whether the domain's job failed only because the DNS server was off,
// so that a server started with it takes the job up without the user setting the policy again.
func waitedForDNS(d *ep.ReservedDomain) bool {
	st := d.CertificateManagementStatus
	if st == nil || st.ProvisioningJob == nil || d.ACMEChallengeCNAMETarget == nil {
		return false
	}
	return st.ProvisioningJob.Msg == wildcardWithoutDNS(d.Domain, *d.ACMEChallengeCNAMETarget)
}

// report rewrites the domain's provisioning job with set, when that changes it.
func (m *Manager) report(ctx context.Context, md store.ManagedDomain, set func(*ep.CertJob)) {
	st := md.Domain.CertificateManagementStatus
	if st == nil || st.ProvisioningJob == nil {
		return // a certificate is issued; nothing is being provisioned
	}
	probe := *st.ProvisioningJob
	set(&probe)
	if sameJob(&probe, st.ProvisioningJob) {
		return
	}
	policy := *md.Domain.CertificateManagementPolicy
	err := m.update(ctx, md.AccountID, md.Domain.ID, policy, func(d *ep.ReservedDomain) {
		if d.CertificateManagementStatus.ProvisioningJob != nil {
			set(d.CertificateManagementStatus.ProvisioningJob)
		}
	})
	if err != nil && !errors.Is(err, errStale) {
		m.log.Warn("certificate manager: writing a domain's status failed", "domain", md.Domain.Domain, "err", err)
	}
}

func sameJob(a, b *ep.CertJob) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Msg == b.Msg && a.StartedAt == b.StartedAt && eq(a.ErrorCode, b.ErrorCode) && eq(a.RetriesAt, b.RetriesAt)
}

// errStale stops a write whose domain changed policy (or lost it) since the job started.
var errStale = errors.New("certmgr: the domain's certificate policy changed")

// update changes the domain with fn, provided it still has policy and a status.
func (m *Manager) update(ctx context.Context, account, domainID string, policy ep.CertPolicy, fn func(d *ep.ReservedDomain)) error {
	_, err := m.cfg.Store.Update(ctx, ep.Caller{AccountID: account}, ep.ReservedDomains, "", domainID, func(_ *ep.Op, doc ep.Document) error {
		d := doc.(*ep.ReservedDomain)
		if d.CertificateManagementPolicy == nil || *d.CertificateManagementPolicy != policy || d.CertificateManagementStatus == nil {
			return errStale
		}
		fn(d)
		return nil
	})
	if ep.IsNotFound(err) {
		return errStale
	}
	return err
}
