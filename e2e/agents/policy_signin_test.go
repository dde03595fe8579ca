package agents

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// TestTrafficPolicySignIn: the oauth and openid-connect traffic policy actions sign visitors in
// through the modules' providers: account A's agent endpoint with openid-connect (its own
// client) and account B's edge route with oauth (the operator's managed GitHub application)
// each send a browser to the provider and carry its requests on, with the identity headers, to
// their own agent; the action's auth_id names its session cookie, and /ngrok/logout ends the
// session. A configuration ngrok refuses is refused by the API (400 ERR_NGROK_215) and as an
// agent's bind (ERR_NGROK_301), naming the field.
func TestTrafficPolicySignIn(t *testing.T) {
	ca, caFile := newOutboundCA(t, "sign-in provider CA")
	p := newSignInProvider(t, ca)
	g := newGitHubProvider(t, ca, map[string]string{"managed-client": "managed-secret"})
	wa := start(t, "--outbound-allow-private", "--outbound-ca", caFile, "--oauth-endpoints", oauthEndpoints(g), "--oauth-app", "github=managed-client:managed-secret")
	wb := wa.asAccount("tenant-b")
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "agent email=%s", r.Header.Get("ngrok-auth-user-email"))
	})

	// A: an agent endpoint whose policy signs in with openid-connect.
	_, token := wa.credential()
	oidcDoc := `
on_http_request:
  - actions:
      - type: openid-connect
        config:
          issuer_url: ` + p.url + `
          client_id: sso-client
          client_secret: sso-secret
          scopes: [email]
          auth_id: sso
          authz_url_params: {prompt: login}
          idle_session_timeout: 30m
`
	tun, err := wa.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("tp-sso-a.edgeplane.app"),
		config.WithTrafficPolicy(oidcDoc)))
	if err != nil {
		t.Fatalf("bind with openid-connect: %v", err)
	}
	serveTunnel(t, tun, upstream)

	// B: an edge route whose traffic_policy signs in with oauth through the managed application.
	_, tokenB := wb.credential()
	wb.reserveDomain("tp-gh-b.example.com")
	ltun, err := wb.mustConnect(tokenB).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "gh-b")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, ltun, upstream)
	group := wb.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "gh-b"}})
	edge := wb.mustCreate("/edges/https", map[string]any{"hostports": []string{"tp-gh-b.example.com:443"}})
	route := "/edges/https/" + edge + "/routes/" + wb.mustCreate("/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})
	if st := wb.call("PUT", route+"/traffic_policy", map[string]any{"value": `{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"github"}}]}]}`}, nil); st != 200 {
		t.Fatalf("put the oauth policy: %d", st)
	}

	browser := signInBrowser(func(host string) string {
		if strings.HasSuffix(host, ".edgeplane.app") || strings.HasSuffix(host, ".example.com") {
			return wa.https
		}
		return ""
	}, wa.caPEM, []byte(ca.CertPEM))
	fetch := func(u string) (int, string) {
		resp, err := browser.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := fetch("https://tp-sso-a.edgeplane.app/"); st != 200 || body != "agent email=dana@example.com" {
		t.Errorf("openid-connect on A's bind: %d %q", st, body)
	}
	u, _ := http.NewRequest("GET", "https://tp-sso-a.edgeplane.app/", nil)
	named := false
	for _, c := range browser.Jar.Cookies(u.URL) {
		named = named || c.Name == "ngrok.sso.session"
	}
	if !named {
		t.Errorf("the session cookie is not named by auth_id: %v", browser.Jar.Cookies(u.URL))
	}
	eventually(t, 5*time.Second, "B's route signs in with GitHub", func() bool {
		st, body := fetch("https://tp-gh-b.example.com/")
		return st == 200 && body == "agent email=octo@example.com"
	})
	if asked := g.Asked(); len(asked) == 0 || asked[0] != "managed-client read:user user:email" {
		t.Errorf("GitHub's authorization requests: %q", asked)
	}
	// Logging out of A's endpoint ends its session only: the next request goes to the provider.
	noFollow := *browser
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if resp, err := noFollow.Get("https://tp-sso-a.edgeplane.app/ngrok/logout?auth_id=sso"); err == nil {
		resp.Body.Close()
	}
	if resp, err := noFollow.Get("https://tp-sso-a.edgeplane.app/"); err != nil || resp.StatusCode != 302 || !strings.HasPrefix(resp.Header.Get("Location"), p.url+"/authorize") ||
		!strings.Contains(resp.Header.Get("Location"), "prompt=login") {
		t.Errorf("after logout: %v %v, want a redirect to the provider with prompt=login", err, resp)
	} else {
		resp.Body.Close()
	}
	if resp, err := noFollow.Get("https://tp-gh-b.example.com/"); err != nil || resp.StatusCode != 200 {
		t.Errorf("B's session after A's logout: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	// Refusals name the field.
	for doc, field := range map[string]string{
		`{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"myspace"}}]}]}`:                                                                                             "config.provider",
		`{"on_http_request":[{"actions":[{"type":"oauth","config":{"provider":"github","client_id":"x"}}]}]}`:                                                                              "config.client_secret",
		`{"on_http_request":[{"actions":[{"type":"openid-connect","config":{"issuer_url":"http://idp.example","client_id":"c","client_secret":"s"}}]}]}`:                                   "config.issuer_url",
		`{"on_http_request":[{"actions":[{"type":"openid-connect","config":{"issuer_url":"https://idp.example","client_id":"c","client_secret":"s","max_session_duration":"forever"}}]}]}`: "config.max_session_duration",
	} {
		var e apiError
		if st := wb.call("PUT", route+"/traffic_policy", map[string]any{"value": doc}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" || !strings.Contains(e.Msg, field+":") {
			t.Errorf("PUT %s: %d %s %q, want 400 ERR_NGROK_215 naming %s", doc, st, e.ErrorCode, e.Msg, field)
		}
	}
	_, err = wa.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("tp-bad-a.edgeplane.app"),
		config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"openid-connect","config":{"issuer_url":"`+p.url+`","client_id":"sso-client"}}]}]}`)))
	if ngrokCode(err) != "ERR_NGROK_301" || !strings.Contains(err.Error(), "config.client_secret") {
		t.Errorf("a bind with openid-connect without client_secret: %v, want ERR_NGROK_301 naming client_secret", err)
	}
}
