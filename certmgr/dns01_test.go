package certmgr_test

// Wildcard certificates over DNS-01, against a real Pebble whose DNS lookups go through a
// resolver that follows the test DNS server's CNAME records into a real authdns server reading
// the real store (internal/pebbletest): issuance for two accounts, and every error path, with
// the state, error code and message docs/dataplane.md names.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/authdns"
	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/internal/pebbletest"
	"github.com/edgeplane/edgeplane/store"
)

// dnsServer starts edgeplane's DNS server for the default CNAME zone on the test's store and
// returns its UDP address.
func (e *env) dnsServer() string {
	e.t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	s := authdns.New(authdns.Config{Zone: ep.DefaultCNAMEZone, Challenges: certmgr.Answers{Store: e.st}})
	s.Serve(pc, nil)
	e.t.Cleanup(s.Close)
	return pc.LocalAddr().String()
}

// dnsPebble starts the DNS server and a Pebble whose lookups reach it through the CNAME records
// of its test DNS server.
func (e *env) dnsPebble(o pebbletest.Options) *pebbletest.Pebble {
	e.t.Helper()
	o.Zone, o.ZoneServer = ep.DefaultCNAMEZone, e.dnsServer()
	return e.pebble(o)
}

// account makes another account on the test's store.
func (e *env) account(name string) ep.Caller {
	e.t.Helper()
	c, _, err := e.st.EnsureAccount(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// reserveAs reserves host for caller with a certificate management policy and returns the
// domain.
func (e *env) reserveAs(caller ep.Caller, host string) *ep.ReservedDomain {
	e.t.Helper()
	keyType := "ecdsa"
	body := &ep.ReservedDomainCreate{Domain: &host, CertificateManagementPolicy: &ep.CertPolicyFields{PrivateKeyType: &keyType}}
	if err := body.Validate(); err != nil {
		e.t.Fatal(err)
	}
	d, err := e.st.Create(context.Background(), caller, ep.ReservedDomains, "", body)
	if err != nil {
		e.t.Fatal(err)
	}
	return d.(*ep.ReservedDomain)
}

// waitAs is waitDomain for a domain of caller's account.
func (e *env) waitAs(caller ep.Caller, id, what string, cond func(d *ep.ReservedDomain) bool) *ep.ReservedDomain {
	e.t.Helper()
	saved := e.caller
	e.caller = caller
	defer func() { e.caller = saved }()
	return e.waitDomain(id, what, cond)
}

// challengeName is the name the domain's DNS-01 challenge is asked at.
func challengeName(d *ep.ReservedDomain) string {
	return "_acme-challenge." + strings.TrimPrefix(d.Domain, "*.")
}

// Two accounts each get the wildcard certificate of their own domain, each through the CNAME
// record of its own _acme-challenge name; B cannot reserve A's wildcard.
func TestWildcardDNS01(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.dnsPebble(pebbletest.Options{})
		a, b := e.caller, e.account("certmgr-test-b")
		da, db := e.reserveAs(a, "*.a.example.com"), e.reserveAs(b, "*.b.example.com")
		for _, d := range []*ep.ReservedDomain{da, db} {
			pb.SetCNAME(t, challengeName(d), *d.ACMEChallengeCNAMETarget)
		}
		host := "*.a.example.com"
		if _, err := st.Create(context.Background(), b, ep.ReservedDomains, "", &ep.ReservedDomainCreate{Domain: &host}); err == nil {
			t.Fatal("account B reserved A's wildcard")
		}
		e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots, DNS01: true})
		for _, c := range []struct {
			caller ep.Caller
			d      *ep.ReservedDomain
		}{{a, da}, {b, db}} {
			d := e.waitAs(c.caller, c.d.ID, "certified", certified)
			cert, err := st.Get(context.Background(), c.caller.AccountID, ep.TLSCertificates, "", d.Certificate.ID)
			if err != nil {
				t.Fatal(err)
			}
			if tc := cert.(*ep.TLSCertificate); tc.IssuedAt == nil || fmt.Sprint(tc.SubjectAlternativeNames.DNSNames) != "["+c.d.Domain+"]" {
				t.Fatalf("certificate of %s: %+v", c.d.Domain, tc.SubjectAlternativeNames)
			}
			e.waitNoLease(c.d.ID, c.d.Domain)
		}
	})
}

// A wildcard domain whose _acme-challenge name has no CNAME record, or one pointing at another
// domain's target (here another account's, whose own job is answering at the same time), is
// DNS_ERROR naming the CNAME record to make; the other account's certificate is issued.
func TestWildcardDNS01WrongCNAME(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.dnsPebble(pebbletest.Options{})
		b := e.account("certmgr-test-b")
		missing := e.reserveAs(e.caller, "*.missing.example.com")
		wrong := e.reserveAs(e.caller, "*.wrong.example.com")
		other := e.reserveAs(b, "*.other.example.com")
		pb.SetCNAME(t, challengeName(wrong), *other.ACMEChallengeCNAMETarget)
		pb.SetCNAME(t, challengeName(other), *other.ACMEChallengeCNAMETarget)
		e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots, DNS01: true})
		for _, d := range []*ep.ReservedDomain{missing, wrong} {
			got := e.waitDomain(d.ID, "failing with DNS_ERROR", failing(ep.CertErrorDNS))
			j := job(got)
			want := fmt.Sprintf("Make sure %s is a CNAME record pointing at %s", challengeName(d), *d.ACMEChallengeCNAMETarget)
			if j.RetriesAt != nil || got.Certificate != nil || !strings.Contains(j.Msg, want) ||
				!strings.Contains(j.Msg, "The ACME server could not validate "+d.Domain) || !strings.Contains(j.Msg, "--dns-listen") {
				t.Fatalf("%s: %s; want a DNS_ERROR saying %q", d.Domain, statusString(got), want)
			}
		}
		e.waitAs(b, other.ID, "certified", certified)
	})
}

// Without the DNS server (DNS01 off) a wildcard domain's job is DNS_ERROR naming --dns-listen and
// the CNAME record, and no order is placed; a manager with the DNS server on takes the job up
// without the policy being set again, and the certificate is issued.
func TestWildcardWithoutDNSServer(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.dnsPebble(pebbletest.Options{})
		d := e.reserveAs(e.caller, "*.later.example.com")
		pb.SetCNAME(t, challengeName(d), *d.ACMEChallengeCNAMETarget)
		off := e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots})
		got := e.waitDomain(d.ID, "failing with DNS_ERROR", failing(ep.CertErrorDNS))
		j := job(got)
		for _, want := range []string{"--dns-listen", "_acme-challenge.later.example.com -> " + *d.ACMEChallengeCNAMETarget, "DNS-01"} {
			if !strings.Contains(j.Msg, want) || j.RetriesAt != nil {
				t.Fatalf("job without the DNS server: %s; want it to say %q", statusString(got), want)
			}
		}
		if l, ok := e.lease(d.ID); ok {
			t.Fatalf("a job was started without the DNS server: %+v", l)
		}
		off.Close()
		e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots, DNS01: true, Replica: "with-dns"})
		e.waitDomain(d.ID, "certified once the DNS server is on", certified)
	})
}

// An ACME server that refuses the wildcard's name is DNS_ERROR quoting its reason, as for any
// name.
func TestWildcardRefusedIsDNSError(t *testing.T) {
	forEngines(t, func(t *testing.T, st *store.Store) {
		e := newEnv(t, st)
		pb := e.dnsPebble(pebbletest.Options{Blocklist: []string{"refused.example.com"}})
		d := e.reserveAs(e.caller, "*.refused.example.com")
		pb.SetCNAME(t, challengeName(d), *d.ACMEChallengeCNAMETarget)
		e.manager(certmgr.Config{Directory: pb.Directory, Roots: pb.Roots, DNS01: true})
		got := e.waitDomain(d.ID, "failing with DNS_ERROR", failing(ep.CertErrorDNS))
		if j := job(got); j.RetriesAt != nil || !strings.Contains(j.Msg, "The ACME server refuses to issue a certificate for *.refused.example.com (") {
			t.Fatalf("refused wildcard: %s", statusString(got))
		}
	})
}
