package agents

// Wildcard managed certificates end to end: edgeplane serve with its DNS server (--dns-listen)
// and a real Pebble (internal/pebbletest) whose lookups follow the _acme-challenge CNAME records
// of its test DNS server into edgeplane's zone. Two accounts each get the certificate of their
// wildcard domain over DNS-01, and the TLS listener serves it for a name under the wildcard that
// a real agent of the account binds, with its traffic.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"

	"github.com/edgeplane/edgeplane/internal/pebbletest"
)

func TestWildcardCertificateOverDNS01(t *testing.T) {
	t.Parallel()
	dnsAddr := "127.0.0.1:" + strconv.Itoa(pebbletest.FreePort(t))
	pb := pebbletest.Start(t, pebbletest.Options{HTTPPort: pebbletest.FreePort(t), TLSPort: pebbletest.FreePort(t),
		Zone: "cname.edgeplane.app", ZoneServer: dnsAddr})
	a := start(t, "--dns-listen", dnsAddr, "--dns-addresses", "127.0.0.1",
		"--acme-directory", pb.Directory, "--acme-ca-roots", pb.RootsFile)
	b := a.asAccount("team-b")

	type domain struct {
		ID, Domain               string
		ACMEChallengeCNAMETarget string `json:"acme_challenge_cname_target"`
		Certificate              *struct{ ID string }
	}
	reserve := func(w *world, name string) domain {
		var d domain
		body := map[string]any{"domain": name, "certificate_management_policy": map[string]any{"private_key_type": "ecdsa"}}
		if st := w.call("POST", "/reserved_domains", body, &d); st != 201 {
			t.Fatalf("reserve %s: %d", name, st)
		}
		pb.SetCNAME(t, "_acme-challenge."+strings.TrimPrefix(name, "*."), d.ACMEChallengeCNAMETarget)
		return d
	}
	da, db := reserve(a, "*.a.example.com"), reserve(b, "*.b.example.com")
	if st := b.call("POST", "/reserved_domains", map[string]any{"domain": "*.a.example.com"}, nil); st/100 != 4 {
		t.Fatalf("account B reserving A's wildcard: %d, want a refusal", st)
	}

	for _, c := range []struct {
		w      *world
		d      domain
		app    string
		answer string
	}{{a, da, "app.a.example.com", "account A's app"}, {b, db, "app.b.example.com", "account B's app"}} {
		// The certificate, issued over DNS-01 through edgeplane's DNS.
		var d domain
		eventually(t, 90*time.Second, c.d.Domain+" certified", func() bool {
			return c.w.call("GET", "/reserved_domains/"+c.d.ID, nil, &d) == 200 && d.Certificate != nil
		})
		var cert struct {
			SerialNumber string `json:"serial_number"`
			IssuedAt     string `json:"issued_at"`
			SANs         struct {
				DNSNames []string `json:"dns_names"`
			} `json:"subject_alternative_names"`
		}
		if st := c.w.call("GET", "/tls_certificates/"+d.Certificate.ID, nil, &cert); st != 200 || cert.IssuedAt == "" ||
			fmt.Sprint(cert.SANs.DNSNames) != "["+c.d.Domain+"]" {
			t.Fatalf("certificate of %s: %d %+v", c.d.Domain, st, cert)
		}

		// A real agent of the account binds a name under the wildcard; the TLS listener
		// presents the issued wildcard certificate for it, and the request reaches the agent.
		_, token := c.w.credential()
		sess := c.w.mustConnect(token)
		tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(c.app)))
		if err != nil {
			t.Fatalf("listen %s: %v", c.app, err)
		}
		answer := c.answer
		serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, answer) }))
		var presented *x509.Certificate
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, a.https)
			},
			// Every attempt makes a handshake of its own: a connection kept from an attempt made
			// before the plan had the certificate would present the certificate of that
			// handshake (edgeplane's CA's) for ever.
			DisableKeepAlives: true,
			// The chain is Pebble's, whose roots live in Pebble's memory: the test checks that the
			// certificate presented is the one issued, by serial, and names the wildcard.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
				presented = cs.PeerCertificates[0]
				return nil
			}},
		}}
		var body string
		eventually(t, 30*time.Second, c.app+" served with the wildcard certificate", func() bool {
			presented = nil
			resp, err := client.Get("https://" + c.app + "/")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == 200 && presented != nil && presented.SerialNumber.Text(16) == cert.SerialNumber
		})
		if body != c.answer || fmt.Sprint(presented.DNSNames) != "["+c.d.Domain+"]" {
			t.Fatalf("%s: body %q, certificate for %v", c.app, body, presented.DNSNames)
		}
	}
}
