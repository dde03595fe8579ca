package agents

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// TestTrafficPolicySignInInterpolation: the oauth action's client_id and client_secret
// interpolate CEL, rendered per request from the account's own variables. The same document
// signs account A's agent endpoint in with app-a and account B's edge route in with app-b (each
// named from endpoint.host through set-vars), through the GitHub-shaped provider, which checks
// each secret. An endpoint of B rendering A's client_id with its own (wrong) secret never signs
// in with A's secret, even after A's stage signed in with it: the provider refuses B's exchange
// (502 ERR_NGROK_5211). A client_id that does not render answers 503 ERR_NGROK_3900 naming the
// field; one read from ngrok's vaults (secrets.get) is refused as a bind (ERR_NGROK_301) and
// fails a route closed (503 ERR_NGROK_3210), naming secrets.get.
func TestTrafficPolicySignInInterpolation(t *testing.T) {
	ca, caFile := newOutboundCA(t, "sign-in provider CA")
	g := newGitHubProvider(t, ca, map[string]string{"app-a": "secret-a", "app-b": "secret-b"})
	wa := start(t, "--outbound-allow-private", "--outbound-ca", caFile, "--oauth-endpoints", oauthEndpoints(g))
	wb := wa.asAccount("tenant-b")
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "agent email=%s", r.Header.Get("ngrok-auth-user-email"))
	})
	// tp-ci-a.… renders app-a and secret-a, tp-ci-b.… app-b and secret-b.
	doc := `
on_http_request:
  - actions:
      - type: set-vars
        config: {vars: [{app: "app-${endpoint.host.substring(6, 7)}"}]}
      - type: oauth
        config: {provider: github, client_id: "${vars.app}", client_secret: "secret-${vars.app.substring(4)}"}
`
	_, tokenA := wa.credential()
	tun, err := wa.mustConnect(tokenA).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("tp-ci-a.edgeplane.app"), config.WithTrafficPolicy(doc)))
	if err != nil {
		t.Fatalf("A's bind: %v", err)
	}
	serveTunnel(t, tun, upstream)

	_, tokenB := wb.credential()
	sessB := wb.mustConnect(tokenB)
	wb.reserveDomain("tp-ci-b.example.com")
	ltun, err := sessB.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "ci-b")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, ltun, upstream)
	group := wb.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "ci-b"}})
	edge := wb.mustCreate("/edges/https", map[string]any{"hostports": []string{"tp-ci-b.example.com:443"}})
	route := "/edges/https/" + edge + "/routes/" + wb.mustCreate("/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})
	if st := wb.call("PUT", route+"/traffic_policy", map[string]any{"value": doc}, nil); st != 200 {
		t.Fatalf("put B's policy: %d", st)
	}
	// B's bind naming A's client with a secret of B's own.
	tun, err = sessB.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("tp-ci-b2.edgeplane.app"), config.WithTrafficPolicy(`
on_http_request:
  - expressions: ["req.url.path == '/header'"]
    actions:
      - type: oauth
        config: {provider: github, client_id: "${req.headers['x-app'][0]}", client_secret: "s"}
  - actions:
      - type: oauth
        config: {provider: github, client_id: "app-a", client_secret: "${'not-' + 'secret-a'}"}
`)))
	if err != nil {
		t.Fatalf("B's second bind: %v", err)
	}
	serveTunnel(t, tun, upstream)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(wa.caPEM)
	roots.AppendCertsFromPEM([]byte(ca.CertPEM))
	newBrowser := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if h := strings.Split(addr, ":")[0]; strings.HasSuffix(h, ".edgeplane.app") || strings.HasSuffix(h, ".example.com") {
					addr = wa.https
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}}
	}
	fetch := func(c *http.Client, u string) (*http.Response, string) {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	if resp, body := fetch(newBrowser(), "https://tp-ci-a.edgeplane.app/"); resp.StatusCode != 200 || body != "agent email=octo@example.com" {
		t.Errorf("A's endpoint: %d %q", resp.StatusCode, body)
	}
	// Until B's edge is in the plan its name has no certificate and the handshake fails, so
	// an error here is waited out rather than fatal.
	eventually(t, 5*time.Second, "B's route signs in with app-b", func() bool {
		resp, err := newBrowser().Get("https://tp-ci-b.example.com/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == "agent email=octo@example.com"
	})
	asked := g.Asked()
	if len(asked) < 2 || asked[0] != "app-a read:user user:email" || asked[len(asked)-1] != "app-b read:user user:email" {
		t.Errorf("the provider's authorization requests: %q, want app-a's then app-b's", asked)
	}
	// B's endpoint naming app-a signs in with its own secret, never A's.
	resp, body := fetch(newBrowser(), "https://tp-ci-b2.edgeplane.app/")
	if resp.StatusCode != 502 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" || !strings.Contains(body, "did not accept the sign-in") {
		t.Errorf("B's endpoint with app-a and its own secret: %d %s %q, want 502 ERR_NGROK_5211", resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
	}
	resp, body = fetch(newBrowser(), "https://tp-ci-b2.edgeplane.app/header")
	if resp.StatusCode != 503 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3900" || !strings.Contains(body, "field client_id") {
		t.Errorf("a client_id that does not render: %d %s %q, want 503 ERR_NGROK_3900 naming client_id", resp.StatusCode, resp.Header.Get("ngrok-error-code"), body)
	}

	// ngrok's vaults do not exist here.
	vault := `{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"github","client_id":"app-b","client_secret":"${secrets.get('vault', 'gh')}"}}]}]}`
	_, err = sessB.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("tp-ci-b3.edgeplane.app"), config.WithTrafficPolicy(vault)))
	if ngrokCode(err) != "ERR_NGROK_301" || !strings.Contains(err.Error(), "secrets.get") {
		t.Errorf("a bind reading client_secret from a vault: %v, want ERR_NGROK_301 naming secrets.get", err)
	}
	if st := wb.call("PUT", route+"/traffic_policy", map[string]any{"value": vault}, nil); st != 200 {
		t.Fatalf("put the vault policy: %d", st)
	}
	eventually(t, 5*time.Second, "B's route reading a vault fails closed", func() bool {
		resp, body := fetch(newBrowser(), "https://tp-ci-b.example.com/")
		return resp.StatusCode == 503 && resp.Header.Get("ngrok-error-code") == "ERR_NGROK_3210" && strings.Contains(body, "secrets.get")
	})
	// A's endpoint is A's: it still signs in.
	if resp, body := fetch(newBrowser(), "https://tp-ci-a.edgeplane.app/"); resp.StatusCode != 200 || body != "agent email=octo@example.com" {
		t.Errorf("A's endpoint after B's changes: %d %q", resp.StatusCode, body)
	}
}
