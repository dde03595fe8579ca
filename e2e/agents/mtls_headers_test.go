package agents

// The headers ngrok's mutual TLS adds to the upstream request about the client's certificate
// (ngrok-mtls-subject-cn, -subject-alt-name-dns, -email-addresses, -serial-number), on live
// traffic through real agents, two accounts: account A's HTTPS edge with the mutual_tls module,
// account B's agent bind with mutual TLS. A client's own spelling of them never reaches the
// agent, and a client of one account's CA is refused by the other account's host.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// mtlsClient is a client certificate of ca with a subject common name, DNS and email subject
// alternative names and a serial number of its own.
func (ca *bindCA) mtlsClient(t *testing.T, cn string, serial int64, dns, emails []string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns, EmailAddresses: emails,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// echoHeaders answers with the request's headers as JSON.
var echoHeaders = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(r.Header) })

func TestMutualTLSHeadersLive(t *testing.T) {
	a := start(t)
	b := a.asAccount("team-b")
	caA, caB := newBindCA(t, "A's client CA"), newBindCA(t, "B's client CA")

	// Account A: an HTTPS edge with mutual_tls, to A's agent's labeled tunnel.
	_, tokenA := a.credential()
	a.reserveDomain("mtls-a.example.com")
	tunA, err := a.mustConnect(tokenA).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "mtls-a")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tunA, echoHeaders)
	group := a.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "mtls-a"}})
	ca := a.mustCreate("/certificate_authorities", map[string]any{"ca_pem": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caA.cert.Raw}))})
	edge := a.mustCreate("/edges/https", map[string]any{"hostports": []string{"mtls-a.example.com:443"},
		"mutual_tls": map[string]any{"certificate_authority_ids": []string{ca}}})
	a.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})

	// Account B: an agent's https bind with mutual TLS.
	_, tokenB := b.credential()
	tunB, err := b.mustConnect(tokenB).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("mtls-b.edgeplane.app"), config.WithMutualTLSCA(caB.cert)))
	if err != nil {
		t.Fatalf("listen with mutual TLS: %v", err)
	}
	serveTunnel(t, tunB, echoHeaders)

	clientA := caA.mtlsClient(t, "client of A", 4242, []string{"a1.client.test", "a2.client.test"}, []string{"ops@client.test"})
	clientB := caB.mtlsClient(t, "client of B", 77, nil, []string{"b@client.test", "b2@client.test"})
	withCert := func(cert tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, a.https)
			},
			TLSClientConfig: &tls.Config{RootCAs: a.ca, Certificates: []tls.Certificate{cert}},
		}}
	}
	for _, c := range []struct {
		host  string
		cert  tls.Certificate
		want  map[string]string
		which string
	}{
		{"mtls-a.example.com", clientA,
			map[string]string{"Ngrok-Mtls-Subject-Cn": "client of A", "Ngrok-Mtls-Subject-Alt-Name-Dns": "a1.client.test, a2.client.test",
				"Ngrok-Mtls-Email-Addresses": "ops@client.test", "Ngrok-Mtls-Serial-Number": "4242"}, "A's edge"},
		{"mtls-b.edgeplane.app", clientB,
			map[string]string{"Ngrok-Mtls-Subject-Cn": "client of B", "Ngrok-Mtls-Email-Addresses": "b@client.test, b2@client.test",
				"Ngrok-Mtls-Serial-Number": "77"}, "B's bind"},
	} {
		client := withCert(c.cert)
		spoofed := map[string]*string{"Ngrok-Mtls-Subject-Cn": ptr("admin"), "Ngrok-Mtls-Subject-Alt-Name-Dns": ptr("admin.test"),
			"ngrok-mtls-serial-number": ptr("1"), "NGROK-MTLS-OTHER": ptr("spoofed"), "ngrok_mtls_subject_cn": ptr("admin")}
		var body []byte
		eventually(t, 3*time.Second, c.which+" serves", func() bool {
			resp, b, err := try(client, "GET", "https://"+c.host+"/", spoofed)
			body = b
			return err == nil && resp.StatusCode == 200
		})
		saw := upstreamSaw(t, body)
		for _, k := range []string{"Ngrok-Mtls-Subject-Cn", "Ngrok-Mtls-Subject-Alt-Name-Dns", "Ngrok-Mtls-Email-Addresses", "Ngrok-Mtls-Serial-Number", "Ngrok-Mtls-Other", "Ngrok_mtls_subject_cn"} {
			got := saw.Values(k)
			if want, ok := c.want[k]; (ok && (len(got) != 1 || got[0] != want)) || (!ok && len(got) != 0) {
				t.Errorf("%s: the agent saw %s %q, want %q", c.which, k, got, c.want[k])
			}
		}
		client.CloseIdleConnections()
	}

	// A client of one account's CA is refused by the other account's edge or bind: nothing
	// reaches the other account's agent, with or without the headers.
	for _, c := range []struct {
		host, which string
		cert        tls.Certificate
	}{{"mtls-a.example.com", "B's client at A's edge", clientB}, {"mtls-b.edgeplane.app", "A's client at B's bind", clientA}} {
		client := withCert(c.cert)
		if resp, body, err := try(client, "GET", "https://"+c.host+"/", nil); err == nil {
			t.Errorf("%s: %d %s, want the handshake refused", c.which, resp.StatusCode, body)
		}
		client.CloseIdleConnections()
	}
}
