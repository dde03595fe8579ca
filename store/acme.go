package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// The certificate manager's state (migrations 0006 and 0015): the acme_jobs table, one row per
// reserved domain whose certificate is being ordered. See the certmgr package for how the rows
// are used; the store only keeps them consistent across replicas.

// ManagedDomain is a reserved domain with a certificate management policy.
type ManagedDomain struct {
	AccountID string
	Domain    *ep.ReservedDomain
}

// ManagedDomains returns every reserved domain, of every account, that has a certificate
// management policy.
func (s *Store) ManagedDomains(ctx context.Context) ([]ManagedDomain, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT account_id, doc FROM objects WHERE kind = ? ORDER BY id`), ep.ReservedDomains.Kind)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []ManagedDomain
	for rows.Next() {
		var account string
		var body []byte
		if err := rows.Scan(&account, &body); err != nil {
			return nil, s.classify(err)
		}
		if !strings.Contains(string(body), `"certificate_management_policy":{`) {
			continue // cheap filter before decoding
		}
		d, err := decode(ep.ReservedDomains, body)
		if err != nil {
			return nil, err
		}
		if rd := d.(*ep.ReservedDomain); rd.CertificateManagementPolicy != nil {
			out = append(out, ManagedDomain{AccountID: account, Domain: rd})
		}
	}
	return out, s.classify(rows.Err())
}

// ACMEJob is the stored state of one domain's certificate order.
type ACMEJob struct {
	// OrderURL is the ACME order in progress, "" before one is made.
	OrderURL string
	// Attempts counts the failed attempts since the last success.
	Attempts int
}

// AcquireACMELease makes holder the only replica working on the domain until ttl from now, and
// returns the job's state; ok is false when another holder's lease has not yet expired. The row
// is made on first use.
func (s *Store) AcquireACMELease(ctx context.Context, account, domainID, host, holder string, ttl time.Duration) (job ACMEJob, ok bool, err error) {
	now := time.Now()
	until := ep.FormatTime(now.Add(ttl))
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO acme_jobs (domain_id, account_id, host, holder, lease_until, order_url, attempts, token, key_auth)
			VALUES (?, ?, ?, '', '', '', 0, '', '') ON CONFLICT (domain_id) DO NOTHING`), domainID, account, host)
		if err != nil {
			return s.classify(err)
		}
		res, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE acme_jobs SET holder = ?, lease_until = ?, host = ?
			WHERE domain_id = ? AND (holder = ? OR lease_until < ?)`), holder, until, host, domainID, holder, ep.FormatTime(now))
		if err != nil {
			return s.classify(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return s.classify(err)
		}
		ok = n == 1
		return nil
	})
	if err != nil || !ok {
		return ACMEJob{}, false, err
	}
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT order_url, attempts FROM acme_jobs WHERE domain_id = ?`), domainID).
		Scan(&job.OrderURL, &job.Attempts)
	return job, err == nil, s.classify(err)
}

// UpdateACMEJob changes the job of a domain whose lease holder holds: any of its fields
// (order, attempts, challenge) and the lease's end. It returns ErrLeaseLost when holder no
// longer holds the lease.
func (s *Store) UpdateACMEJob(ctx context.Context, domainID, holder string, ttl time.Duration, set func(j *ACMEJobUpdate)) error {
	var u ACMEJobUpdate
	if set != nil {
		set(&u)
	}
	q := `UPDATE acme_jobs SET lease_until = ?`
	args := []any{ep.FormatTime(time.Now().Add(ttl))}
	if u.OrderURL != nil {
		q, args = q+`, order_url = ?`, append(args, *u.OrderURL)
	}
	if u.Attempts != nil {
		q, args = q+`, attempts = ?`, append(args, *u.Attempts)
	}
	if u.Challenge != nil {
		q, args = q+`, token = ?, key_auth = ?`, append(args, u.Challenge[0], u.Challenge[1])
		if u.DNSName == nil {
			u.DNSName = new(string) // a challenge answered by the listeners
		}
	}
	if u.DNSName != nil {
		q, args = q+`, dns_name = ?`, append(args, *u.DNSName)
	}
	q, args = q+` WHERE domain_id = ? AND holder = ?`, append(args, domainID, holder)
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
		if err != nil {
			return s.classify(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.classify(err)
		} else if n == 0 {
			return ErrLeaseLost
		}
		return nil
	})
}

// ACMEJobUpdate is what UpdateACMEJob changes besides the lease: nil fields stay as they are.
type ACMEJobUpdate struct {
	OrderURL *string
	Attempts *int
	// Challenge is the token and key authorization being answered ("", "" for none).
	Challenge *[2]string
	// DNSName is the name under which a DNS-01 challenge is answered (the domain's
	// acme_challenge_cname_target); with Challenge and no DNSName the challenge is answered by
	// the listeners (HTTP-01, TLS-ALPN-01), which never read a row with a DNS name.
	DNSName *string
}

// ErrLeaseLost is returned when a replica's lease on an ACME job has passed to another.
var ErrLeaseLost = errors.New("store: the lease on this certificate job is held by another replica")

// ReleaseACMELease ends holder's lease on the domain's job, keeping the job's state, so another
// replica (or this one after a restart) can take it up at once.
func (s *Store) ReleaseACMELease(ctx context.Context, domainID, holder string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE acme_jobs SET holder = '', lease_until = '' WHERE domain_id = ? AND holder = ?`), domainID, holder)
		return s.classify(err)
	})
}

// DeleteACMEJob forgets a domain's job: its certificate was issued, or its policy removed.
func (s *Store) DeleteACMEJob(ctx context.Context, domainID string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM acme_jobs WHERE domain_id = ?`), domainID)
		return s.classify(err)
	})
}

// ACMELease is the lease of one domain's job: who holds it and until when.
type ACMELease struct {
	DomainID string
	// Holder is the replica holding the lease, "" when it was released.
	Holder string
	// Until is when the lease ends unless renewed; zero when it was released.
	Until time.Time
}

// ACMELeases returns the lease of every domain that has a job row, so that a replica leaves a
// job another holds alone until its lease ends, and forgets the jobs of domains that lost their
// policy.
func (s *Store) ACMELeases(ctx context.Context) ([]ACMELease, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT domain_id, holder, lease_until FROM acme_jobs ORDER BY domain_id`)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []ACMELease
	for rows.Next() {
		var l ACMELease
		var until string
		if err := rows.Scan(&l.DomainID, &l.Holder, &until); err != nil {
			return nil, s.classify(err)
		}
		if until != "" {
			if l.Until, err = time.Parse(ep.TimeFormat, until); err != nil {
				return nil, fmt.Errorf("store: acme_jobs.lease_until of %s: %w", l.DomainID, err)
			}
		}
		out = append(out, l)
	}
	return out, s.classify(rows.Err())
}

// ACMEChallenge returns the key authorization of the challenge answered for host with token;
// ok is false when no job of host answers that token.
func (s *Store) ACMEChallenge(ctx context.Context, host, token string) (keyAuth string, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT key_auth FROM acme_jobs WHERE host = ? AND token = ? AND token <> '' AND dns_name = ''`), host, token).Scan(&keyAuth)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return keyAuth, err == nil, s.classify(err)
}

// ACMEKeyAuth returns the key authorization of the challenge answered for host, whatever its
// token (TLS-ALPN-01 names no token); ok is false when none is.
func (s *Store) ACMEKeyAuth(ctx context.Context, host string) (keyAuth string, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT key_auth FROM acme_jobs WHERE host = ? AND token <> '' AND dns_name = ''`), host).Scan(&keyAuth)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return keyAuth, err == nil, s.classify(err)
}

// ACMEDNSChallenge returns the key authorization of the DNS-01 challenge answered at name (a
// wildcard domain's acme_challenge_cname_target, lowercase, without the final dot); ok is false
// when no job answers one there.
func (s *Store) ACMEDNSChallenge(ctx context.Context, name string) (keyAuth string, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT key_auth FROM acme_jobs WHERE dns_name = ? AND token <> ''`), name).Scan(&keyAuth)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return keyAuth, err == nil, s.classify(err)
}
