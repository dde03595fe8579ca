package ingress

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/internal/testpki"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// chainEndpoint is an answerEndpoint with a chain of stages, which the listener asks what its
// policies read of their connections.
type chainEndpoint struct {
	answerEndpoint
	chain *enforce.Chain
}

func (e *chainEndpoint) Chain() *enforce.Chain { return e.chain }

func (e *chainEndpoint) HTTPHandler(func() http.Handler) http.Handler {
	return e.chain.Handler(e.answerEndpoint.HTTPHandler(nil))
}

// BenchmarkPublicTLSConnection measures new HTTPS connections to an https endpoint through the
// TLS listener (client and listener in this process): each operation is a TLS handshake (no
// resumption) and one request. "policy=none" is the common path, an endpoint whose chain reads
// nothing of its connections; "policy=ja4" an endpoint whose traffic policy answers with
// conn.tls.ja4_fingerprint, so the listener fingerprints each ClientHello. "cpu-ns/op" is the
// CPU time of the whole process per connection.
//
//	go test -run XXX -bench PublicTLSConnection -benchtime 3000x -count 5 ./ingress/
func BenchmarkPublicTLSConnection(b *testing.B) {
	certPEM, keyPEM := testpki.SelfSignedPEM(b, "app.example.com", false)
	cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		b.Fatal(err)
	}
	policies := map[string]string{
		"policy=none": "",
		"policy=ja4":  `{"on_http_request":[{"actions":[{"type":"custom-response","config":{"status_code":200,"body":"${conn.tls.ja4_fingerprint}"}}]}]}`,
	}
	for _, name := range []string{"policy=none", "policy=ja4"} {
		b.Run(name, func(b *testing.B) {
			ep := &chainEndpoint{}
			if doc := policies[name]; doc != "" {
				p, err := trafficpolicy.Parse(doc)
				if err != nil {
					b.Fatal(err)
				}
				tp, err := enforce.NewTrafficPolicy(p)
				if err != nil {
					b.Skip("this build does not apply the policy: ", err)
				}
				ep.chain = &enforce.Chain{HTTP: []enforce.Stage{tp}}
			}
			s := New(Config{Certificate: func(string) (*tls.Certificate, error) { return &cert, nil },
				Lookup: func(proto, host string) Endpoint {
					if proto == "https" && host == "app.example.com" {
						return ep
					}
					return nil
				}})
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.com", ClientSessionCache: nil},
				DialContext:     benchServe(b, s, (*Server).ServeTLS)}}
			get := func() {
				resp, err := client.Get("https://app.example.com/")
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || len(body) == 0 {
					b.Fatalf("%d %q", resp.StatusCode, body)
				}
			}
			benchParallel(b, 200, get)
		})
	}
}
