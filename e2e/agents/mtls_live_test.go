package agents

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestMutualTLSTurnedOnLive: turning mutual_tls on for an HTTPS edge applies to a keep-alive
// connection made before it too. That connection's handshake never asked for a certificate, so
// its next request is answered 421 ERR_NGROK_3200 (and the connection closed), while a client
// with a certificate from the module's CA gets through.
func TestMutualTLSTurnedOnLive(t *testing.T) {
	w := start(t, "--public-idle-timeout", "10m")
	w.reserveDomain("live-mtls.example.com")
	resp := w.mustCreate("/backends/http_response", map[string]any{"body": "inside", "status_code": 200})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"live-mtls.example.com:443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": resp}})
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", w.https) }
	without := &http.Client{Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: w.ca}}}
	status := func(c *http.Client) (int, string) {
		r, err := c.Get("https://live-mtls.example.com/")
		if err != nil {
			return 0, err.Error()
		}
		_, _ = io.Copy(io.Discard, r.Body) // read to the end, so the connection is kept alive
		r.Body.Close()
		return r.StatusCode, r.Header.Get("ngrok-error-code")
	}
	eventually(t, 3*time.Second, "the edge serves without mutual TLS", func() bool { st, _ := status(without); return st == 200 })

	caPEM, clientCert := clientCA(t)
	ca := w.mustCreate("/certificate_authorities", map[string]any{"ca_pem": caPEM})
	if st := w.call("PUT", "/edges/https/"+edge+"/mutual_tls", map[string]any{"certificate_authority_ids": []string{ca}}, nil); st != 200 {
		t.Fatalf("put mutual_tls: %d", st)
	}
	// The same keep-alive connection: 421 once the plan has mutual TLS, never a 200 after that.
	var code string
	eventually(t, 3*time.Second, "the keep-alive connection refused", func() bool {
		var st int
		st, code = status(without)
		return st != 200
	})
	if code != "ERR_NGROK_3200" {
		t.Errorf("the connection made before mutual_tls got %q, want 421 ERR_NGROK_3200", code)
	}
	if st, _ := status(without); st != 0 {
		t.Errorf("a new connection without a certificate was answered %d, want a failed handshake", st)
	}
	with := &http.Client{Transport: &http.Transport{DialContext: dial,
		TLSClientConfig: &tls.Config{RootCAs: w.ca, Certificates: []tls.Certificate{clientCert}}}}
	if st, body := status(with); st != 200 {
		t.Errorf("a client with the CA's certificate: %d %s", st, body)
	}
}
