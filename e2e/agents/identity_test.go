package agents

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/oauthtest"
	"github.com/edgeplane/edgeplane/pki"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.ngrok.com/ngrok/config"
)

// signInBrowser is a browser for the sign-in flows: it keeps cookies, follows redirects,
// trusts the CAs in caPEMs, and dials each host route names an address for (edgeplane's
// listener) there, any other (the identity provider) directly.
func signInBrowser(route func(host string) string, caPEMs ...[]byte) *http.Client {
	roots := x509.NewCertPool()
	for _, pem := range caPEMs {
		roots.AppendCertsFromPEM(pem)
	}
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			if a := route(host); a != "" {
				addr = a
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
}

// signInProvider is an OpenID provider the test serves over TLS with a certificate only
// --outbound-ca trusts: discovery, JWKS, an authorize endpoint that signs its user in at once,
// and a token endpoint returning RS256-signed ID tokens after checking the PKCE verifier.
type signInProvider struct {
	url   string
	key   *rsa.PrivateKey
	mu    sync.Mutex
	codes map[string][3]string // code -> nonce, challenge, redirect_uri
}

func newSignInProvider(t *testing.T, ca *pki.CA) *signInProvider {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	p := &signInProvider{key: key, codes: map[string][3]string{}}
	cert, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	p.url = "https://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": p.url, "authorization_endpoint": p.url + "/authorize",
			"token_endpoint": p.url + "/token", "jwks_uri": p.url + "/jwks", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		code := fmt.Sprintf("%x", b)
		p.mu.Lock()
		p.codes[code] = [3]string{q.Get("nonce"), q.Get("code_challenge"), q.Get("redirect_uri")}
		p.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, secret, _ := r.BasicAuth()
		p.mu.Lock()
		c, ok := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		p.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || id != "sso-client" || secret != "sso-secret" || base64.RawURLEncoding.EncodeToString(sum[:]) != c[1] || r.PostForm.Get("redirect_uri") != c[2] {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k"))
		now := time.Now()
		idt, _ := jwt.Signed(sig).Claims(map[string]any{"iss": p.url, "aud": "sso-client", "sub": "user-7", "nonce": c[0],
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "email": "dana@example.com", "email_verified": true, "name": "Dana"}).Serialize()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at", "token_type": "Bearer", "id_token": idt})
	})
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	return p
}

// TestSignInOIDC: an HTTPS edge route with the oidc module sends a browser to the provider
// (discovered over TLS trusted through --outbound-ca), takes it back on the callback edgeplane
// serves, and carries its requests to a real ngrok-go agent with the identity headers, a spoofed
// one replaced; /ngrok/logout ends the session.
func TestSignInOIDC(t *testing.T) {
	ca, caFile := newOutboundCA(t, "sign-in provider CA")
	p := newSignInProvider(t, ca)

	w := start(t, "--outbound-allow-private", "--outbound-ca", caFile)
	_, token := w.credential()
	w.reserveDomain("sso.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "sso")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "agent %s email=%s id=%s name=%s", r.URL.RequestURI(), r.Header.Get("ngrok-auth-user-email"),
			r.Header.Get("ngrok-auth-user-id"), r.Header.Get("ngrok-auth-user-name"))
	}))
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "sso"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"sso.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+route+"/oidc", map[string]any{
		"issuer": p.url, "client_id": "sso-client", "client_secret": "sso-secret", "scopes": []string{"email", "profile"},
		"cookie_prefix": "sso.",
	}, nil); st != 200 {
		t.Fatalf("put oidc: %d", st)
	}

	// The browser reaches edgeplane's TLS listener for sso.example.com and the provider directly,
	// trusting both CAs, keeping cookies and following redirects.
	browser := signInBrowser(func(host string) string {
		if host == "sso.example.com" {
			return w.https
		}
		return ""
	}, w.caPEM, []byte(ca.CertPEM))
	fetch := func(u string, hdr ...string) (int, string, *http.Response) {
		req, _ := http.NewRequest("GET", u, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := browser.Do(req)
		if err != nil {
			return 0, err.Error(), nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp
	}
	var body string
	// The route is created before its module: until the module is in the plan, the request
	// reaches the agent without a sign-in (and without the client's identity header).
	eventually(t, 5*time.Second, "the oidc route signs in", func() bool {
		var st int
		st, body, _ = fetch("https://sso.example.com/app?x=1", "ngrok-auth-user-email", "mallory@example.com")
		if st == 200 && strings.Contains(body, "mallory") {
			t.Fatalf("the client's identity header reached the agent: %q", body)
		}
		return st == 200 && strings.Contains(body, "id=user-7")
	})
	if body != "agent /app?x=1 email=dana@example.com id=user-7 name=Dana" {
		t.Fatalf("after sign-in: %q", body)
	}
	// Signed in: the provider is not asked again, and a spoofed identity header is replaced.
	p.mu.Lock()
	p.codes = nil // any new sign-in would fail here
	p.mu.Unlock()
	if st, body, _ := fetch("https://sso.example.com/next", "Ngrok-Auth-User-Id", "admin"); st != 200 || !strings.Contains(body, "id=user-7") {
		t.Fatalf("signed in: %d %q", st, body)
	}
	// Logout, then a request is sent to the provider again.
	if st, body, _ := fetch("https://sso.example.com/ngrok/logout"); st != 200 || !strings.Contains(body, "signed out") {
		t.Fatalf("logout: %d %q", st, body)
	}
	browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	st, _, resp := fetch("https://sso.example.com/app")
	if st != 302 || !strings.HasPrefix(resp.Header.Get("Location"), p.url+"/authorize?") ||
		!strings.Contains(resp.Header.Get("Location"), url.QueryEscape("https://sso.example.com/ngrok/oauth2/callback")) {
		t.Fatalf("after logout: %d %s", st, resp.Header.Get("Location"))
	}
}

// TestSignInOIDCBind: an agent endpoint bound with ngrok-go's WithOIDC gets the same sign-in:
// an allowed user reaches the agent with the identity headers; with allow_domains naming
// another domain, the same user gets 403 ERR_NGROK_3129 and never reaches the agent.
func TestSignInOIDCBind(t *testing.T) {
	ca, caFile := newOutboundCA(t, "sign-in provider CA")
	p := newSignInProvider(t, ca)
	w := start(t, "--outbound-allow-private", "--outbound-ca", caFile)
	_, token := w.credential()
	sess := w.mustConnect(token)
	for host, opts := range map[string][]config.OIDCOption{
		"sso-ok.edgeplane.app":   {config.WithAllowOIDCDomain("example.com"), config.WithOIDCScope("email")},
		"sso-deny.edgeplane.app": {config.WithAllowOIDCDomain("other.org")},
	} {
		tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host),
			config.WithOIDC(p.url, "sso-client", "sso-secret", opts...)))
		if err != nil {
			t.Fatalf("bind %s with OIDC: %v", host, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "agent email=%s", r.Header.Get("ngrok-auth-user-email"))
		}))
	}
	browser := signInBrowser(func(host string) string {
		if strings.HasSuffix(host, ".edgeplane.app") {
			return w.https
		}
		return ""
	}, w.caPEM, []byte(ca.CertPEM))
	fetch := func(u string) (int, string, string) {
		resp, err := browser.Get(u)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("ngrok-error-code")
	}
	if st, body, _ := fetch("https://sso-ok.edgeplane.app/"); st != 200 || body != "agent email=dana@example.com" {
		t.Fatalf("allowed: %d %q", st, body)
	}
	if st, body, code := fetch("https://sso-deny.edgeplane.app/"); st != 403 || code != "ERR_NGROK_3129" || strings.Contains(body, "agent") {
		t.Fatalf("denied: %d %s %q", st, code, body)
	}
	// An issuer that is not https: the bind is refused naming the module.
	if _, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("sso-bad.edgeplane.app"),
		config.WithOIDC("http://idp.example", "c", "s"))); err == nil || !strings.Contains(err.Error(), "oidc") {
		t.Fatalf("an http issuer: %v", err)
	}
}

// newGitHubProvider starts a GitHub-shaped provider over TLS with a certificate only
// --outbound-ca trusts, knowing clients (client id -> secret), with octo@example.com signed in.
func newGitHubProvider(t *testing.T, ca *pki.CA, clients map[string]string) *oauthtest.GitHub {
	cert, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return oauthtest.NewGitHub(t, oauthtest.Options{Clients: clients, Certificate: cert,
		User: oauthtest.User{ID: 42, Login: "octo", Name: "Octo Cat", Email: "octo@example.com"}})
}

// oauthEndpoints is the --oauth-endpoints value pointing GitHub at g.
func oauthEndpoints(g *oauthtest.GitHub) string {
	return "github=" + g.AuthorizeURL() + "," + g.TokenURL() + "," + g.UserURL()
}

// TestSignInOAuthBind: an agent endpoint bound with ngrok-go's WithOAuth("github") gets the
// oauth sign-in, through the operator's managed application (--oauth-app) at the provider given
// with --oauth-endpoints: an allowed user reaches the agent with the identity headers; a user
// outside allow_emails and allow_domains gets 403 ERR_NGROK_3129 and never reaches the agent. On
// a server without --oauth-app, a bind with its own client (WithOAuthClientID and
// WithOAuthClientSecret) signs in with it and asks for its scopes, while a bind without one is
// refused with ERR_NGROK_3208 naming the flag.
func TestSignInOAuthBind(t *testing.T) {
	ca, caFile := newOutboundCA(t, "oauth provider CA")
	g := newGitHubProvider(t, ca, map[string]string{"managed-client": "managed-secret", "own-client": "own-secret"})
	managed := start(t, "--outbound-allow-private", "--outbound-ca", caFile, "--oauth-endpoints", oauthEndpoints(g), "--oauth-app", "github=managed-client:managed-secret")
	own := start(t, "--outbound-allow-private", "--outbound-ca", caFile, "--oauth-endpoints", oauthEndpoints(g))

	hosts := map[string]string{} // public name -> the https listener serving it
	bind := func(w *world, host string, opts ...config.OAuthOption) error {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host),
			config.WithOAuth("github", opts...)))
		if err != nil {
			return err
		}
		hosts[host] = w.https
		serveTunnel(t, tun, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "agent email=%s id=%s", r.Header.Get("ngrok-auth-user-email"), r.Header.Get("ngrok-auth-user-id"))
		}))
		return nil
	}
	for host, opts := range map[string][]config.OAuthOption{
		// Each list admits on its own: the user is in the domains of one and the addresses of the
		// other, and in neither of the third's.
		"gh-domain.edgeplane.app": {config.WithAllowOAuthDomain("example.com"), config.WithAllowOAuthEmail("nobody@other.org")},
		"gh-email.edgeplane.app":  {config.WithAllowOAuthEmail("someone@else.org", "OCTO@example.com"), config.WithAllowOAuthDomain("other.org")},
		"gh-deny.edgeplane.app":   {config.WithAllowOAuthEmail("octo@example.org"), config.WithAllowOAuthDomain("other.org")},
	} {
		if err := bind(managed, host, opts...); err != nil {
			t.Fatalf("bind %s with OAuth: %v", host, err)
		}
	}
	if err := bind(own, "gh-own.edgeplane.app", config.WithOAuthClientID("own-client"), config.WithOAuthClientSecret("own-secret"),
		config.WithAllowOAuthEmail("octo@example.com"), config.WithOAuthScope("repo")); err != nil {
		t.Fatalf("bind with its own client: %v", err)
	}
	err := bind(own, "gh-none.edgeplane.app", config.WithAllowOAuthDomain("example.com"))
	if code := ngrokCode(err); code != "ERR_NGROK_3208" || !strings.Contains(err.Error(), "--oauth-app github=") {
		t.Fatalf("a bind without a client on a server without --oauth-app: %v, want ERR_NGROK_3208 naming --oauth-app", err)
	}

	browser := signInBrowser(func(host string) string { return hosts[host] }, managed.caPEM, own.caPEM, []byte(ca.CertPEM))
	fetch := func(u string) (int, string, string) {
		resp, err := browser.Get(u)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("ngrok-error-code")
	}
	for _, host := range []string{"gh-domain.edgeplane.app", "gh-email.edgeplane.app", "gh-own.edgeplane.app"} {
		if st, body, _ := fetch("https://" + host + "/"); st != 200 || body != "agent email=octo@example.com id=42" {
			t.Fatalf("allowed on %s: %d %q", host, st, body)
		}
	}
	if st, body, code := fetch("https://gh-deny.edgeplane.app/"); st != 403 || code != "ERR_NGROK_3129" || strings.Contains(body, "agent") {
		t.Fatalf("denied: %d %s %q", st, code, body)
	}
	// The managed binds signed in with the managed application and its default scopes; the bind
	// with its own client, with that client and the scope it asked for.
	asked := g.Asked()
	var managedN, ownN int
	for _, a := range asked {
		switch a {
		case "managed-client read:user user:email":
			managedN++
		case "own-client read:user user:email repo":
			ownN++
		default:
			t.Errorf("unexpected authorization request %q", a)
		}
	}
	if managedN != 3 || ownN != 1 {
		t.Errorf("authorization requests: %q, want 3 with the managed client and 1 with the bind's own", asked)
	}
}

// TestIdentityHeadersNeverPassThrough: a public client's ngrok-auth-* headers never reach an
// agent, on an endpoint and on an edge's route that have no sign-in module at all: only a
// sign-in module sets them, and an upstream trusting them must not be told a name the client
// chose (for example while a route exists before its module does).
func TestIdentityHeadersNeverPassThrough(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("plain.example.com")
	sess := w.mustConnect(token)
	identity := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var seen []string
		for k, v := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "ngrok-auth-") {
				seen = append(seen, k+"="+strings.Join(v, ","))
			}
		}
		fmt.Fprintf(rw, "identity headers: %q", seen)
	})
	ep, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("plain.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, ep, identity)
	lt, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "plain")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, lt, identity)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "plain"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"plain.example.com:443"}})
	w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})

	spoof := func(c *http.Client, url string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Ngrok-Auth-User-Email", "mallory@example.com")
		req.Header["ngrok-auth-user-id"] = []string{"admin"} // not canonical, as a raw client may send it
		req.Header.Set("Ngrok-Auth-Anything", "x")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := spoof(w.httpClient(), "http://plain.edgeplane.app/"); st != 200 || body != `identity headers: []` {
		t.Errorf("endpoint: %d %s", st, body)
	}
	c := w.httpsClient()
	eventually(t, 3*time.Second, "the edge is in the plan", func() bool { return statusOf(c, "https://plain.example.com/") == 200 })
	if st, body := spoof(c, "https://plain.example.com/"); st != 200 || body != `identity headers: []` {
		t.Errorf("edge route: %d %s", st, body)
	}
}
