package enforce

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewjam/saml"
	"github.com/edgeplane/edgeplane/internal/samltest"
	"github.com/edgeplane/edgeplane/store"
)

// memoryOnce is a UseOnce for the tests that are not about replays: a map, without expiry.
func memoryOnce() func(ctx context.Context, scope, id string, expires time.Time) (bool, error) {
	var mu sync.Mutex
	used := map[string]bool{}
	return func(_ context.Context, scope, id string, _ time.Time) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		k := scope + "\x00" + id
		fresh := !used[k]
		used[k] = true
		return fresh, nil
	}
}

// storeOnce is a real store on a SQLite file of the test's own (its UseOnce, its record of ended
// sessions), closed at the test's end; a test may close it earlier, as a database outage.
func storeOnce(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "edgeplane.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// captured is an answer of the IdP as someone watching the browser would keep it: the form it
// posts to the ACS and the cookies sent with it.
type captured struct {
	form    samltest.Form
	cookies []*http.Cookie
}

// capture returns a tamper for samltest.Browse that keeps the IdP's answer and the browser's
// cookies for the ACS, and sends the browser elsewhere (a path of the service provider that
// answers 404), so that the test posts the answer itself.
func (e *samlEnv) capture(b *http.Client, into *captured) func(samltest.Form) samltest.Form {
	return func(f samltest.Form) samltest.Form {
		acs, err := url.Parse(f.Action)
		if err != nil {
			e.t.Fatal(err)
		}
		into.form = samltest.Form{Action: f.Action, Values: url.Values{}}
		for k, v := range f.Values {
			into.form.Values[k] = append([]string(nil), v...)
		}
		if b.Jar != nil {
			into.cookies = b.Jar.Cookies(acs)
		}
		f.Action = e.sp + "/not-the-acs"
		return f
	}
}

// post sends a captured answer to the ACS with its cookies, as an attacker replaying it would:
// no cookie jar, no redirect followed.
func (e *samlEnv) post(c captured) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.form.Action, strings.NewReader(c.form.Values.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, ck := range c.cookies {
		req.AddCookie(ck)
	}
	client := *e.srv.Client()
	client.Jar = nil
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// sessionSet reports whether resp starts a session (sets a non-empty session cookie).
func sessionSet(resp *http.Response) bool {
	for _, c := range resp.Cookies() {
		if c.Name == "ngrok.session" && c.Value != "" && c.MaxAge >= 0 {
			return true
		}
	}
	return false
}

// wantReplayRefused: the first post of an answer signs in (303 and a session), the same answer
// posted again is 403 ERR_NGROK_5211 without a session.
func wantReplayRefused(t *testing.T, e *samlEnv, c captured) {
	t.Helper()
	first := e.post(c)
	if first.StatusCode != http.StatusSeeOther || !sessionSet(first) {
		t.Fatalf("first post of the answer: %d %s, session set %v", first.StatusCode, first.Header.Get("ngrok-error-code"), sessionSet(first))
	}
	again := e.post(c)
	if again.StatusCode != http.StatusForbidden || again.Header.Get("ngrok-error-code") != "ERR_NGROK_5211" {
		t.Fatalf("replayed answer: %d %q, want 403 ERR_NGROK_5211", again.StatusCode, again.Header.Get("ngrok-error-code"))
	}
	if sessionSet(again) {
		t.Fatal("a replayed answer started a session")
	}
}

// TestSAMLReplaySPInitiated: an SP-initiated answer captured with its sign-in cookie (which is
// stateless: clearing it in the browser does not stop a copy) signs in once only.
func TestSAMLReplaySPInitiated(t *testing.T) {
	st := storeOnce(t)
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.UseOnce = st.UseOnce })
	e.idp.SetUser(&samltest.User{NameID: "alice"})
	var c captured
	b := e.newBrowser()
	if p := e.visit(b, "GET", "/app", nil, e.capture(b, &c)); p.Status != http.StatusNotFound {
		t.Fatalf("the captured answer went on: %d %s", p.Status, p.Body)
	}
	if len(c.cookies) == 0 || c.form.Values.Get("SAMLResponse") == "" {
		t.Fatalf("nothing captured: %+v", c)
	}
	wantReplayRefused(t, e, c)

	// Another route keeps its own assertions: the same store, another scope.
	other, err := st.UseOnce(context.Background(), "saml:rt_other", "_x", time.Now().Add(time.Minute))
	if err != nil || !other {
		t.Fatalf("another scope: fresh %v, %v", other, err)
	}
}

// TestSAMLReplayIdPInitiated: with allow_idp_initiated an answer needs no cookie at all, and
// still signs in once only.
func TestSAMLReplayIdPInitiated(t *testing.T) {
	st := storeOnce(t)
	e := newSAMLEnv(t, func(c *SAMLConfig) { c.AllowIdPInitiated, c.UseOnce = true, st.UseOnce })
	e.idp.SetUser(&samltest.User{NameID: "alice"})
	var c captured
	req, _ := http.NewRequest("GET", e.idp.StartURL(e.sp+"/metadata", "/wiki"), nil)
	if _, err := samltest.Browse(e.newBrowser(), req, e.capture(&http.Client{}, &c)); err != nil {
		t.Fatal(err)
	}
	if c.form.Values.Get("SAMLResponse") == "" {
		t.Fatal("no answer captured")
	}
	wantReplayRefused(t, e, c)
	if _, hits := e.lastUpstream(); hits != 0 {
		t.Fatalf("the upstream was reached %d times by posts to the ACS", hits)
	}
}

// TestSAMLUseOnceFailsClosed: without a record of used assertions, or with its store failing,
// a good answer is refused with 503 ERR_NGROK_3210 and starts no session.
func TestSAMLUseOnceFailsClosed(t *testing.T) {
	for name, useOnce := range map[string]func(context.Context, string, string, time.Time) (bool, error){
		"none": nil,
		"store down": func(context.Context, string, string, time.Time) (bool, error) {
			return false, errors.New("database unavailable")
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newSAMLEnv(t, func(c *SAMLConfig) { c.AllowIdPInitiated, c.UseOnce = true, useOnce })
			e.idp.SetUser(&samltest.User{NameID: "alice"})
			var c captured
			req, _ := http.NewRequest("GET", e.idp.StartURL(e.sp+"/metadata", "/"), nil)
			if _, err := samltest.Browse(e.newBrowser(), req, e.capture(&http.Client{}, &c)); err != nil {
				t.Fatal(err)
			}
			resp := e.post(c)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3210" || sessionSet(resp) {
				t.Fatalf("%d %q, session set %v; want 503 ERR_NGROK_3210 and none", resp.StatusCode, resp.Header.Get("ngrok-error-code"), sessionSet(resp))
			}
		})
	}
}

// TestAssertionExpiry: an accepted assertion is kept used until its latest NotOnOrAfter plus the
// clock skew, at least the IssueInstant window plus that skew, at most a day.
func TestAssertionExpiry(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	window := saml.MaxIssueDelay + saml.MaxClockSkew
	with := func(issued, cond, subj time.Time) *saml.Assertion {
		a := &saml.Assertion{ID: "_a", IssueInstant: issued}
		if !cond.IsZero() {
			a.Conditions = &saml.Conditions{NotOnOrAfter: cond}
		}
		if !subj.IsZero() {
			a.Subject = &saml.Subject{SubjectConfirmations: []saml.SubjectConfirmation{
				{SubjectConfirmationData: &saml.SubjectConfirmationData{NotOnOrAfter: subj}}}}
		}
		return a
	}
	for name, c := range map[string]struct {
		a    *saml.Assertion
		want time.Time
	}{
		"conditions":              {with(now, now.Add(time.Hour), time.Time{}), now.Add(time.Hour + saml.MaxClockSkew)},
		"latest of both":          {with(now, now.Add(10*time.Minute), now.Add(time.Hour)), now.Add(time.Hour + saml.MaxClockSkew)},
		"no NotOnOrAfter":         {with(now.Add(-time.Minute), time.Time{}, time.Time{}), now.Add(window)},
		"short conditions":        {with(now, now.Add(time.Second), time.Time{}), now.Add(window)},
		"IdP clock ahead":         {with(now.Add(2*time.Minute), now.Add(time.Minute), time.Time{}), now.Add(2*time.Minute + window)},
		"far NotOnOrAfter":        {with(now, now.Add(30*24*time.Hour), time.Time{}), now.Add(maxAssertionKept)},
		"far future IssueInstant": {with(now.Add(48*time.Hour), time.Time{}, time.Time{}), now.Add(maxAssertionKept)},
	} {
		if got := assertionExpiry(c.a, now); !got.Equal(c.want) {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
}
