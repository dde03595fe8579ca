package store_test

// The certificate manager's store (acme.go, migration 0006) on every engine of the run: the lease
// that gives one replica at a time a domain's job, the job's state, the challenge answers every
// replica reads, and the listing of managed domains.

import (
	"context"
	"errors"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// reserveManaged reserves host with a certificate management policy and returns its id.
func reserveManaged(t *testing.T, s *store.Store, c ep.Caller, host string) string {
	t.Helper()
	kt := "ecdsa"
	body := &ep.ReservedDomainCreate{Domain: &host, CertificateManagementPolicy: &ep.CertPolicyFields{PrivateKeyType: &kt}}
	if err := body.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := s.Create(context.Background(), c, ep.ReservedDomains, "", body)
	if err != nil {
		t.Fatal(err)
	}
	return d.Base().ID
}

func leaseOf(t *testing.T, s *store.Store, id string) (store.ACMELease, bool) {
	t.Helper()
	leases, err := s.ACMELeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.DomainID == id {
			return l, true
		}
	}
	return store.ACMELease{}, false
}

func TestACMELease(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		s := open(t, dsn)
		ctx := context.Background()
		c := admin(t, s, "acme")
		id := reserveManaged(t, s, c, "lease.example.com")
		plain := "plain.example.com"
		if _, err := s.Create(ctx, c, ep.ReservedDomains, "", &ep.ReservedDomainCreate{Domain: &plain}); err != nil {
			t.Fatal(err)
		}
		managed, err := s.ManagedDomains(ctx)
		if err != nil || len(managed) != 1 || managed[0].Domain.ID != id || managed[0].AccountID != c.AccountID {
			t.Fatalf("managed domains: %+v, %v; want only %s", managed, err, id)
		}

		// The first holder makes the row; another is refused while the lease lasts, and the
		// holder may take it again (renew).
		job, ok, err := s.AcquireACMELease(ctx, c.AccountID, id, "lease.example.com", "a", time.Minute)
		if err != nil || !ok || job.OrderURL != "" || job.Attempts != 0 {
			t.Fatalf("first acquire: %+v %v %v", job, ok, err)
		}
		if _, ok, err := s.AcquireACMELease(ctx, c.AccountID, id, "lease.example.com", "b", time.Minute); err != nil || ok {
			t.Fatalf("b took a's unexpired lease: %v %v", ok, err)
		}
		if _, ok, err := s.AcquireACMELease(ctx, c.AccountID, id, "lease.example.com", "a", time.Minute); err != nil || !ok {
			t.Fatalf("a could not take its own lease again: %v %v", ok, err)
		}
		if l, _ := leaseOf(t, s, id); l.Holder != "a" || time.Until(l.Until) < 50*time.Second {
			t.Fatalf("lease %+v, want a's, for a minute", l)
		}

		// The holder's updates are kept; another's are refused with ErrLeaseLost.
		order, attempts := "https://acme.example/order/1", 2
		err = s.UpdateACMEJob(ctx, id, "a", time.Minute, func(u *store.ACMEJobUpdate) {
			u.OrderURL, u.Attempts, u.Challenge = &order, &attempts, &[2]string{"tok", "tok.thumb"}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateACMEJob(ctx, id, "b", time.Minute, nil); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("b's update: %v, want ErrLeaseLost", err)
		}
		if ka, ok, err := s.ACMEChallenge(ctx, "lease.example.com", "tok"); err != nil || !ok || ka != "tok.thumb" {
			t.Fatalf("HTTP-01 answer: %q %v %v", ka, ok, err)
		}
		if _, ok, err := s.ACMEChallenge(ctx, "lease.example.com", "other"); err != nil || ok {
			t.Fatalf("answer for an unknown token: %v %v", ok, err)
		}
		if ka, ok, err := s.ACMEKeyAuth(ctx, "lease.example.com"); err != nil || !ok || ka != "tok.thumb" {
			t.Fatalf("TLS-ALPN-01 answer: %q %v %v", ka, ok, err)
		}
		if _, ok, err := s.ACMEKeyAuth(ctx, "other.example.com"); err != nil || ok {
			t.Fatalf("answer for a host with no job: %v %v", ok, err)
		}

		// Released, the lease is anyone's at once, with the job's state kept for the next holder.
		if err := s.ReleaseACMELease(ctx, id, "a"); err != nil {
			t.Fatal(err)
		}
		if l, _ := leaseOf(t, s, id); l.Holder != "" || !l.Until.IsZero() {
			t.Fatalf("released lease: %+v", l)
		}
		job, ok, err = s.AcquireACMELease(ctx, c.AccountID, id, "lease.example.com", "b", 2*time.Second)
		if err != nil || !ok || job.OrderURL != order || job.Attempts != attempts {
			t.Fatalf("b after the release: %+v %v %v, want the order and attempts kept", job, ok, err)
		}
		if err := s.UpdateACMEJob(ctx, id, "a", time.Minute, nil); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("a's update after losing the lease: %v, want ErrLeaseLost", err)
		}

		// Not renewed, b's lease ends: a is refused until then (every try that ends before the
		// lease does) and takes it after.
		bl, _ := leaseOf(t, s, id)
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, ok, err := s.AcquireACMELease(ctx, c.AccountID, id, "lease.example.com", "a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if time.Now().Before(bl.Until) {
					t.Fatalf("a took b's lease before it ended at %v", bl.Until)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a could not take b's lease, which ended at %v", bl.Until)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := s.UpdateACMEJob(ctx, id, "b", time.Minute, nil); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("b's update after its lease was taken: %v, want ErrLeaseLost", err)
		}

		// Deleted, the job is gone with its answers.
		if err := s.DeleteACMEJob(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, ok := leaseOf(t, s, id); ok {
			t.Fatal("job row left after DeleteACMEJob")
		}
		if _, ok, err := s.ACMEChallenge(ctx, "lease.example.com", "tok"); err != nil || ok {
			t.Fatalf("answer after the job was deleted: %v %v", ok, err)
		}
	})
}

// Leases taken at the same moment by many holders: exactly one wins.
func TestACMELeaseRace(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		s := open(t, dsn)
		c := admin(t, s, "acme-race")
		id := reserveManaged(t, s, c, "race.example.com")
		const holders = 8
		wins := make(chan bool, holders)
		for i := range holders {
			go func() {
				_, ok, err := s.AcquireACMELease(context.Background(), c.AccountID, id, "race.example.com", string(rune('a'+i)), time.Minute)
				if err != nil {
					t.Error(err)
				}
				wins <- ok
			}()
		}
		n := 0
		for range holders {
			if <-wins {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d holders took the lease at once, want 1", n)
		}
	})
}

// A DNS-01 answer is found under its DNS name only, for the job of its own account: another
// account's job answers under its own name and never under this one, the listeners' HTTP-01
// and TLS-ALPN-01 lookups never see it, a challenge answered by the listeners has no DNS name,
// and a cleared challenge (a failed attempt) answers nothing.
func TestACMEDNSChallenge(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		s := open(t, dsn)
		ctx := context.Background()
		a, b := admin(t, s, "dns-a"), admin(t, s, "dns-b")
		idA := reserveManaged(t, s, a, "*.a.example.com")
		idB := reserveManaged(t, s, b, "*.b.example.com")
		nameA, nameB := "aaaaaaaaaaaaaaaa.acme.cname.example.net", "bbbbbbbbbbbbbbbb.acme.cname.example.net"
		for _, j := range []struct{ acct, id, host, name, tok string }{
			{a.AccountID, idA, "*.a.example.com", nameA, "tokA"},
			{b.AccountID, idB, "*.b.example.com", nameB, "tokB"},
		} {
			if _, ok, err := s.AcquireACMELease(ctx, j.acct, j.id, j.host, "r", time.Minute); err != nil || !ok {
				t.Fatalf("acquire %s: %v %v", j.host, ok, err)
			}
			name := j.name
			if err := s.UpdateACMEJob(ctx, j.id, "r", time.Minute, func(u *store.ACMEJobUpdate) {
				u.Challenge, u.DNSName = &[2]string{j.tok, j.tok + ".thumb"}, &name
			}); err != nil {
				t.Fatal(err)
			}
		}
		for name, want := range map[string]string{nameA: "tokA.thumb", nameB: "tokB.thumb"} {
			if ka, ok, err := s.ACMEDNSChallenge(ctx, name); err != nil || !ok || ka != want {
				t.Fatalf("DNS-01 answer at %s: %q %v %v, want %q", name, ka, ok, err, want)
			}
		}
		for _, name := range []string{"cccccccccccccccc.acme.cname.example.net", "", "*.a.example.com"} {
			if _, ok, err := s.ACMEDNSChallenge(ctx, name); err != nil || ok {
				t.Fatalf("DNS-01 answer at %q: %v %v, want none", name, ok, err)
			}
		}
		if _, ok, err := s.ACMEChallenge(ctx, "*.a.example.com", "tokA"); err != nil || ok {
			t.Fatalf("HTTP-01 lookup found a DNS-01 answer: %v %v", ok, err)
		}
		if _, ok, err := s.ACMEKeyAuth(ctx, "*.a.example.com"); err != nil || ok {
			t.Fatalf("TLS-ALPN-01 lookup found a DNS-01 answer: %v %v", ok, err)
		}
		// The same job answering HTTP-01 later (a new attempt) drops its DNS name.
		if err := s.UpdateACMEJob(ctx, idA, "r", time.Minute, func(u *store.ACMEJobUpdate) { u.Challenge = &[2]string{"tokH", "tokH.thumb"} }); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.ACMEDNSChallenge(ctx, nameA); err != nil || ok {
			t.Fatalf("DNS-01 answer after an HTTP-01 challenge replaced it: %v %v", ok, err)
		}
		if ka, ok, err := s.ACMEChallenge(ctx, "*.a.example.com", "tokH"); err != nil || !ok || ka != "tokH.thumb" {
			t.Fatalf("HTTP-01 answer: %q %v %v", ka, ok, err)
		}
		// Cleared (a failed attempt), B's answer is gone.
		if err := s.UpdateACMEJob(ctx, idB, "r", time.Minute, func(u *store.ACMEJobUpdate) { u.Challenge = &[2]string{} }); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.ACMEDNSChallenge(ctx, nameB); err != nil || ok {
			t.Fatalf("DNS-01 answer after the challenge was cleared: %v %v", ok, err)
		}
	})
}
