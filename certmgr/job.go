package certmgr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// work is one run of a domain's job.
type work struct {
	account, domainID, host string
	// dnsName is where a wildcard domain's DNS-01 challenge is answered (its
	// acme_challenge_cname_target), "" for a single name answered by the listeners.
	dnsName string
	policy  ep.CertPolicy
	job     store.ACMEJob
}

// challenge is the challenge type the work answers: DNS-01 for a wildcard domain, else the
// listeners' type.
func (w *work) challenge(listeners string) string {
	if w.dnsName != "" {
		return DNS01
	}
	return listeners
}

// run takes the domain's lease and, holding it, obtains a certificate and installs it, or
// records why it could not.
func (m *Manager) run(md store.ManagedDomain) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.running, md.Domain.ID)
		m.mu.Unlock()
	}()
	d := md.Domain
	w := &work{account: md.AccountID, domainID: d.ID, host: d.Domain, policy: *d.CertificateManagementPolicy}
	if strings.HasPrefix(d.Domain, "*.") && d.ACMEChallengeCNAMETarget != nil {
		w.dnsName = *d.ACMEChallengeCNAMETarget
	}
	job, ok, err := m.cfg.Store.AcquireACMELease(m.ctx, w.account, w.domainID, w.host, m.cfg.Replica, m.cfg.Lease)
	if err != nil || !ok {
		return // another replica holds the job (or the store failed: the next scan tries again)
	}
	w.job = job
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.cfg.Store.ReleaseACMELease(ctx, w.domainID, m.cfg.Replica)
	}()
	// The scan that chose this domain read it before taking the lease; another run (here or on
	// another replica) may have installed its certificate since, so the domain is read again
	// and left alone unless it is still due: no second order for a name just certified.
	fresh, err := m.cfg.Store.Get(m.ctx, w.account, ep.ReservedDomains, "", w.domainID)
	if err != nil {
		return
	}
	d = fresh.(*ep.ReservedDomain)
	if _, due := m.dueAt(d, time.Now()); !due || d.CertificateManagementPolicy == nil || *d.CertificateManagementPolicy != w.policy {
		if installed(d) {
			// Taking the lease made a job row if the run that certified the domain had already
			// deleted its own: a certified domain has no job, so it goes again.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = m.cfg.Store.DeleteACMEJob(ctx, w.domainID)
		}
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.Attempt)
	defer cancel()
	go m.keep(ctx, cancel, w)

	now := time.Now()
	msg := fmt.Sprintf("Ordering a certificate for %s from %s (attempt %d).", w.host, m.cfg.Directory, w.job.Attempts+1)
	if st := d.CertificateManagementStatus; st != nil && st.ProvisioningJob == nil {
		msg = fmt.Sprintf("Renewing the certificate of %s from %s.", w.host, m.cfg.Directory)
	}
	err = m.update(ctx, w.account, w.domainID, w.policy, func(d *ep.ReservedDomain) {
		job := d.CertificateManagementStatus.ProvisioningJob
		if job == nil {
			job = &ep.CertJob{StartedAt: ep.FormatTime(now)}
			d.CertificateManagementStatus.ProvisioningJob = job
		}
		job.Msg, job.ErrorCode, job.RetriesAt = msg, nil, nil
	})
	if err != nil {
		return
	}
	m.log.Info("certificate manager: ordering a certificate", "domain", w.host, "attempt", w.job.Attempts+1)
	got, err := m.obtain(ctx, w, w.policy.PrivateKeyType)
	if err == nil {
		err = m.install(ctx, w, got)
	}
	if err != nil {
		m.fail(w, err)
	}
}

// keep renews the lease while the job runs, and stops the job when the lease is lost or the
// domain's policy changes or goes.
func (m *Manager) keep(ctx context.Context, stop context.CancelFunc, w *work) {
	t := time.NewTicker(m.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := m.cfg.Store.UpdateACMEJob(ctx, w.domainID, m.cfg.Replica, m.cfg.Lease, nil); errors.Is(err, store.ErrLeaseLost) {
			stop()
			return
		}
		doc, err := m.cfg.Store.Get(ctx, w.account, ep.ReservedDomains, "", w.domainID)
		if ep.IsNotFound(err) {
			stop()
			return
		}
		if d, ok := doc.(*ep.ReservedDomain); ok && (d.CertificateManagementPolicy == nil || *d.CertificateManagementPolicy != w.policy) {
			stop()
			return
		}
	}
}

// install stores the certificate as a TLS certificate (issued_at set, its key encrypted with the
// other secrets) and makes it the domain's: served at once, renewed a third of its lifetime
// before it expires. The certificate it replaces is deleted when edgeplane issued it.
func (m *Manager) install(ctx context.Context, w *work, got *issued) error {
	caller := ep.Caller{AccountID: w.account}
	create, err := ep.NewIssuedCertificate(got.chainPEM, got.keyPEM, time.Now())
	if err != nil {
		return fmt.Errorf("the ACME server's certificate was refused: %w", err)
	}
	doc, err := m.cfg.Store.Create(ctx, caller, ep.TLSCertificates, "", create)
	if err != nil {
		return err
	}
	certID := doc.Base().ID
	life := got.leaf.NotAfter.Sub(got.leaf.NotBefore)
	renews := ep.FormatTime(got.leaf.NotAfter.Add(-life / 3))
	var old string
	err = m.update(ctx, w.account, w.domainID, w.policy, func(d *ep.ReservedDomain) {
		if d.Certificate != nil {
			old = d.Certificate.ID
		}
		d.Certificate = ep.NewRef(certID)
		d.CertificateManagementStatus = &ep.CertStatus{RenewsAt: &renews}
	})
	if err != nil {
		_ = m.cfg.Store.Delete(context.WithoutCancel(ctx), caller, ep.TLSCertificates, "", certID)
		return err
	}
	m.log.Info("certificate manager: certificate installed", "domain", w.host, "certificate", certID,
		"not_after", ep.FormatTime(got.leaf.NotAfter), "renews_at", renews)
	if old != "" && old != certID {
		if prev, err := m.cfg.Store.Get(ctx, w.account, ep.TLSCertificates, "", old); err == nil && prev.(*ep.TLSCertificate).IssuedAt != nil {
			_ = m.cfg.Store.Delete(ctx, caller, ep.TLSCertificates, "", old)
		}
	}
	return m.cfg.Store.DeleteACMEJob(ctx, w.domainID)
}

// fail records why the attempt failed: DNS_ERROR for what the user must correct (no retry until
// the policy is set again; the next attempt starts a new order), INTERNAL_ERROR otherwise, retried
// after a delay that doubles with each failure, up to an hour. A job stopped by Close, or by a
// change of the domain's policy, records nothing: it resumes, or a new job replaces it.
func (m *Manager) fail(w *work, err error) {
	if m.ctx.Err() != nil || errors.Is(err, errStale) || errors.Is(err, store.ErrLeaseLost) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var code, msg string
	var retries *string
	attempts := w.job.Attempts + 1
	var dnsErr *dnsError
	if errors.As(err, &dnsErr) {
		code, msg = ep.CertErrorDNS, dnsErr.msg
		attempts = 0
		none := ""
		_ = m.cfg.Store.UpdateACMEJob(ctx, w.domainID, m.cfg.Replica, m.cfg.Lease, func(u *store.ACMEJobUpdate) {
			u.OrderURL, u.Attempts, u.Challenge = &none, &attempts, &[2]string{}
		})
	} else {
		code = ep.CertErrorInternal
		at := ep.FormatTime(time.Now().Add(backoff(m.cfg.RetryBase, attempts)))
		retries = &at
		msg = fmt.Sprintf("Obtaining a certificate for %s failed (attempt %d): %v. edgeplane retries at %s.", w.host, attempts, err, at)
		_ = m.cfg.Store.UpdateACMEJob(ctx, w.domainID, m.cfg.Replica, m.cfg.Lease, func(u *store.ACMEJobUpdate) { u.Attempts = &attempts })
	}
	m.log.Warn("certificate manager: attempt failed", "domain", w.host, "error_code", code, "err", msg)
	werr := m.update(ctx, w.account, w.domainID, w.policy, func(d *ep.ReservedDomain) {
		job := d.CertificateManagementStatus.ProvisioningJob
		if job == nil {
			job = &ep.CertJob{StartedAt: ep.FormatTime(time.Now())}
			d.CertificateManagementStatus.ProvisioningJob = job
		}
		job.ErrorCode, job.Msg, job.RetriesAt = &code, msg, retries
	})
	if werr != nil && !errors.Is(werr, errStale) {
		m.log.Warn("certificate manager: writing a domain's status failed", "domain", w.host, "err", werr)
	}
}

// backoff is the delay before retry number n (from 1): base, doubled each time, at most an hour.
func backoff(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

// installed reports whether the domain holds a certificate and has no job under way: what a run
// leaves once it installed one.
func installed(d *ep.ReservedDomain) bool {
	st := d.CertificateManagementStatus
	return d.Certificate != nil && st != nil && st.ProvisioningJob == nil
}
