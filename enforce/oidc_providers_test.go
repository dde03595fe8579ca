package enforce

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// oidcStageWith is an oidc stage of p's issuer for client id, discovering with client, whose
// providers are cached in ps.
func oidcStageWith(t *testing.T, p *testOIDC, id string, client *http.Client, ps *OIDCProviders) Stage {
	t.Helper()
	st, err := NewOIDC(OIDCConfig{Issuer: p.srv.URL, ClientID: id, ClientSecret: p.secret, Client: client,
		Session: SessionConfig{Key: testKey}, Providers: ps})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startSignIn sends a visitor without a session to st and returns the answer: a redirect to the
// provider once it is discovered, a 502 while it cannot be.
func startSignIn(st Stage) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	st.Wrap(upstreamEcho()).ServeHTTP(rec, httptest.NewRequest("GET", "https://app.example/", nil))
	return rec
}

func wantRedirect(t *testing.T, name string, rec *httptest.ResponseRecorder, p *testOIDC) {
	t.Helper()
	if rec.Code != http.StatusFound || !strings.HasPrefix(rec.Header().Get("Location"), p.srv.URL+"/authorize?") {
		t.Fatalf("%s: %d %q, want a redirect to the provider", name, rec.Code, rec.Header().Get("Location"))
	}
}

// TestOIDCProvidersShared: the stages of one data plane (one OIDCProviders) naming the same
// issuer with the same client share its discovery (one for two accounts' routes and for a
// rebuilt stage); another data plane discovers for itself.
func TestOIDCProvidersShared(t *testing.T) {
	p := newTestOIDC(t)
	ps := NewOIDCProviders()
	for _, id := range []string{"client-of-A", "client-of-B", "client-of-A"} {
		wantRedirect(t, id, startSignIn(oidcStageWith(t, p, id, p.srv.Client(), ps)), p)
	}
	if n := p.discoveries.Load(); n != 1 {
		t.Errorf("%d discoveries for the routes of one data plane, want 1", n)
	}
	if n := ps.len(); n != 1 {
		t.Errorf("%d providers held, want 1", n)
	}
	wantRedirect(t, "another data plane", startSignIn(oidcStageWith(t, p, "client-of-A", p.srv.Client(), NewOIDCProviders())), p)
	if n := p.discoveries.Load(); n != 2 {
		t.Errorf("%d discoveries, want 2 (one per data plane)", n)
	}
}

// TestOIDCProvidersNoPoisoning: a failed discovery is remembered (for oidcRetry) only by the
// entry of the client and the data plane that tried it. Account A, whose client does not trust
// the provider, does not make account B's stage of the same issuer fail; and a data plane that
// tried while the provider was down does not make another data plane (same client, same
// issuer) refuse its visitors once the provider is back.
func TestOIDCProvidersNoPoisoning(t *testing.T) {
	p := newTestOIDC(t)
	ps := NewOIDCProviders()
	untrusting := &http.Client{Timeout: 5 * time.Second} // the system roots only
	if rec := startSignIn(oidcStageWith(t, p, "client-of-A", untrusting, ps)); rec.Code != 502 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_5211" {
		t.Fatalf("A, whose client does not trust the provider: %d %q", rec.Code, rec.Header().Get("ngrok-error-code"))
	}
	wantRedirect(t, "B, same issuer, its own client", startSignIn(oidcStageWith(t, p, "client-of-B", p.srv.Client(), ps)), p)

	client := &http.Client{Transport: p.srv.Client().Transport, Timeout: 5 * time.Second} // the two data planes' one client
	p.discDown.Store(true)
	one := oidcStageWith(t, p, "client-of-A", client, NewOIDCProviders())
	if rec := startSignIn(one); rec.Code != 502 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_5211" {
		t.Fatalf("a data plane while the provider is down: %d %q", rec.Code, rec.Header().Get("ngrok-error-code"))
	}
	p.discDown.Store(false)
	wantRedirect(t, "another data plane once the provider is back", startSignIn(oidcStageWith(t, p, "client-of-B", client, NewOIDCProviders())), p)
	if rec := startSignIn(one); rec.Code != 502 {
		t.Errorf("the first data plane within the retry interval: %d, want its remembered failure (502)", rec.Code)
	}
}

// TestOIDCProvidersDropped: a provider no stage holds any longer is dropped from the data
// plane's cache, so the cache holds no more issuers than the live plans name; a stage built
// after discovers again.
func TestOIDCProvidersDropped(t *testing.T) {
	p, q := newTestOIDC(t), newTestOIDC(t)
	ps := NewOIDCProviders()
	wantRedirect(t, "P's route", startSignIn(oidcStageWith(t, p, "client-of-A", p.srv.Client(), ps)), p)
	kept := oidcStageWith(t, q, "client-of-B", q.srv.Client(), ps)
	wantRedirect(t, "Q's route", startSignIn(kept), q)
	if n := collectedDownTo(ps.len, 1); n != 1 {
		t.Fatalf("%d providers held with one stage left, want 1", n)
	}
	runtime.KeepAlive(kept)
	wantRedirect(t, "P's route built again", startSignIn(oidcStageWith(t, p, "client-of-A", p.srv.Client(), ps)), p)
	if n := p.discoveries.Load(); n != 2 {
		t.Errorf("%d discoveries of a dropped provider rebuilt, want 2", n)
	}
}
