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

// TestSignInBindSessionLimits: --bind-sign-in-max-duration ends the sign-in sessions of agents'
// oauth binds, whose options carry no limit of their own. Accounts A and B each bind an endpoint
// with WithOAuth on the same server: a session works at once on its own endpoint, never on the
// other account's (its cookie, presented there, sends the visitor to the provider), and once the
// limit has passed its next request goes to the provider again instead of reaching the agent.
func TestSignInBindSessionLimits(t *testing.T) {
	ca, caFile := newOutboundCA(t, "oauth provider CA")
	g := newGitHubProvider(t, ca, map[string]string{"managed-client": "managed-secret"})
	a := start(t, "--outbound-allow-private", "--outbound-ca", caFile, "--oauth-endpoints", oauthEndpoints(g),
		"--oauth-app", "github=managed-client:managed-secret", "--bind-sign-in-max-duration", "2s")
	b := a.asAccount("b")
	hosts := map[string]*world{"limit-a.edgeplane.app": a, "limit-b.edgeplane.app": b}
	for host, w := range hosts {
		_, token := w.credential()
		tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(host),
			config.WithOAuth("github")))
		if err != nil {
			t.Fatalf("bind %s with OAuth: %v", host, err)
		}
		serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(rw, "agent of %s for %s", host, r.Header.Get("ngrok-auth-user-email"))
		}))
	}
	browser := signInBrowser(func(host string) string {
		if hosts[host] != nil {
			return a.https
		}
		return "" // the provider, at its own address
	}, a.caPEM, []byte(ca.CertPEM))
	// still does what browser does without following redirects: a request whose session is
	// valid reaches the agent; one without goes to the provider.
	still := *browser
	still.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(c *http.Client, url string, cookies ...*http.Cookie) (int, string, string) {
		req, _ := http.NewRequest("GET", url, nil)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header.Get("Location")
	}
	toProvider := func(st int, loc string) bool {
		return st == http.StatusFound && strings.HasPrefix(loc, g.AuthorizeURL())
	}

	const aURL = "https://limit-a.edgeplane.app/"
	if st, body, _ := get(browser, aURL); st != 200 || body != "agent of limit-a.edgeplane.app for octo@example.com" {
		t.Fatalf("signing in to A's endpoint: %d %q", st, body)
	}
	signedIn := time.Now()
	if st, body, loc := get(&still, aURL); st != 200 || !strings.HasPrefix(body, "agent of limit-a") {
		t.Fatalf("A's session right after signing in: %d %q (Location %q)", st, body, loc)
	}
	// A's cookies, sent to B's endpoint by a client that ignores their domain, sign nobody in.
	u, _ := http.NewRequest("GET", aURL, nil)
	if st, body, loc := get(&http.Client{Transport: still.Transport, CheckRedirect: still.CheckRedirect},
		"https://limit-b.edgeplane.app/", browser.Jar.Cookies(u.URL)...); !toProvider(st, loc) || strings.Contains(body, "agent") {
		t.Fatalf("A's session on B's endpoint: %d %q (Location %q), want a redirect to the provider", st, body, loc)
	}
	// B signs in on its own endpoint with the same browser.
	if st, body, _ := get(browser, "https://limit-b.edgeplane.app/"); st != 200 || body != "agent of limit-b.edgeplane.app for octo@example.com" {
		t.Fatalf("signing in to B's endpoint: %d %q", st, body)
	}
	// The limit ends A's session: its next request goes to the provider, not to the agent.
	eventually(t, 15*time.Second, "A's session ends at --bind-sign-in-max-duration", func() bool {
		st, _, loc := get(&still, aURL)
		return toProvider(st, loc)
	})
	if since := time.Since(signedIn); since < time.Second {
		t.Fatalf("A's session ended %v after signing in, before the 2s limit", since)
	}
	if st, body, loc := get(&still, aURL); !toProvider(st, loc) || strings.Contains(body, "agent") {
		t.Fatalf("A's ended session: %d %q (Location %q)", st, body, loc)
	}
}
