package enforce

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/edgeplane/edgeplane/internal/outbound"
)

// The authorization-code flow the oauth and oidc modules share: a visitor without a session is
// sent to the provider with a state, a nonce and a PKCE challenge (kept in a sealed sign-in
// cookie bound to the state); the provider sends the browser back to the callback path, where
// the code is exchanged and turned into an identity; an allowed identity gets a session and is
// sent back where it started. Sessions are re-checked with the provider every check interval.

// maxProviderBody bounds every response read from an identity provider.
const maxProviderBody = 1 << 20

// signInBackend is one provider protocol behind the flow.
type signInBackend interface {
	// authURL returns where to send the browser to sign in.
	authURL(ctx context.Context, redirect, state string, f *signInFlow) (string, error)
	// finish turns the callback into an identity.
	finish(ctx context.Context, r *http.Request, redirect string, f *signInFlow) (Identity, *signInError)
	// recheck asks the provider whether the session's identity still holds, updating it (new
	// tokens, organizations); an error ends the session.
	recheck(ctx context.Context, id *Identity) error
	// allowed applies the module's authorization to an identity.
	allowed(id Identity) bool
}

// signInFlow is a sign-in in progress, sealed in its cookie.
type signInFlow struct {
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Return   string `json:"r"`
	// App is the digest of the application a traffic policy's sign-in rendered when the
	// sign-in began (appDigest), empty for one whose application is literal.
	App string `json:"a,omitempty"`
}

// signInError is a sign-in that cannot complete: the status and ngrok code of the answer.
type signInError struct {
	status, code int
	msg          string
}

// signIn is the stage of a sign-in module.
type signIn struct {
	module     string
	s          *Sessions
	b          signInBackend
	checkEvery time.Duration
	// app is the digest of the application rendered for this stage when a traffic policy's
	// client_id or client_secret interpolates (appDigest); a callback must render the same.
	app string
}

// Name is the module's name.
func (st *signIn) Name() string { return st.module }

// Wrap serves the module's special paths and admits requests with an allowed session.
func (st *signIn) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		StripIdentityHeaders(r.Header)
		switch r.URL.Path {
		case st.s.Paths.Logout:
			st.s.Logout(w, r)
			return
		case st.s.Paths.Callback:
			st.callback(w, r)
			return
		case st.s.Paths.Login:
			st.s.Clear(w)
			st.begin(w, r, st.s.LocalPath(r.URL.Query().Get("redirect_path")))
			return
		}
		if st.s.Passthrough(r) {
			next.ServeHTTP(w, r)
			return
		}
		sess := st.s.Load(r)
		if sess == nil {
			st.begin(w, r, st.s.ReturnTo(r))
			return
		}
		now := st.s.Now().Unix()
		if st.checkEvery > 0 && now-sess.LastChecked >= int64(st.checkEvery/time.Second) {
			if err := st.b.recheck(r.Context(), &sess.Identity); err != nil {
				st.s.Clear(w)
				st.begin(w, r, st.s.ReturnTo(r))
				return
			}
			sess.LastChecked, sess.LastSeen = now, now
			_ = st.s.Save(w, sess)
		}
		if !st.b.allowed(sess.Identity) {
			Denied(w, r, "You signed in as "+describe(sess.Identity)+", who is not allowed on this endpoint.")
			return
		}
		st.s.Touch(w, sess)
		SetIdentityHeaders(r.Header, sess.Identity)
		next.ServeHTTP(w, r)
	})
}

// begin starts a sign-in: a new state, nonce and PKCE verifier in the sign-in cookie, and a
// redirect to the provider.
func (st *signIn) begin(w http.ResponseWriter, r *http.Request, returnTo string) {
	state := RandomToken()
	f := &signInFlow{Nonce: RandomToken(), Verifier: oauth2.GenerateVerifier(), Return: returnTo, App: st.app}
	u, err := st.b.authURL(r.Context(), redirectURL(r, st.s.Paths.Callback), state, f)
	if err != nil {
		SignInFailed(w, r, http.StatusBadGateway, "The identity provider cannot be reached to sign in: "+fetchFailure(err))
		return
	}
	if err := st.s.SaveFlow(w, state, f); err != nil {
		SignInFailed(w, r, http.StatusInternalServerError, "The sign-in could not be started.")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u, http.StatusFound)
}

// callback finishes a sign-in: the state must match a sign-in cookie of this browser, the
// provider's answer must hold a code, and the identity it yields must be allowed.
func (st *signIn) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f signInFlow
	if !st.s.OpenFlow(w, r, q.Get("state"), &f) {
		msg := "This sign-in expired or was started in another browser. Open the page again to sign in."
		if st.app != "" {
			msg = "This sign-in expired, was started in another browser, or began with another client_id than this request renders. Open the page again to sign in."
		}
		SignInFailed(w, r, http.StatusBadRequest, msg)
		return
	}
	if f.App != st.app {
		SignInFailed(w, r, http.StatusBadRequest, "This sign-in began with another client_secret than this request renders, so it is not finished. Open the page again to sign in.")
		return
	}
	if e := q.Get("error"); e != "" {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider refused the sign-in: "+short(e+" "+q.Get("error_description")))
		return
	}
	if q.Get("code") == "" {
		SignInFailed(w, r, http.StatusBadRequest, "The identity provider sent no authorization code.")
		return
	}
	id, serr := st.b.finish(r.Context(), r, redirectURL(r, st.s.Paths.Callback), &f)
	if serr != nil {
		ErrorPage(w, r, serr.status, serr.code, serr.msg)
		return
	}
	if !st.b.allowed(id) {
		Denied(w, r, "You signed in as "+describe(id)+", who is not allowed on this endpoint.")
		return
	}
	if _, err := st.s.Start(w, r, id); err != nil {
		SignInFailed(w, r, http.StatusBadGateway, "The sign-in could not be kept: "+err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, st.s.LocalPath(f.Return), http.StatusFound)
}

// describe names an identity for an error page.
func describe(id Identity) string {
	if id.Email != "" {
		return id.Email
	}
	if id.Name != "" {
		return id.Name
	}
	return "user " + id.UserID
}

// fetchFailure describes a failed request to a URL of the route's configuration for an error
// page: the class of address the outbound guard refused, when it did (the route fails closed
// until its configuration or the operator's --outbound-allow-private changes), else the
// error's own text, bounded.
func fetchFailure(err error) string {
	if r, ok := outbound.Refused(err); ok {
		return r.Reason() + " (--outbound-allow-private)"
	}
	return short(err.Error())
}

// short bounds a provider-supplied message shown on an error page.
func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// providerContext is ctx carrying client for go-oidc and x/oauth2.
func providerContext(ctx context.Context, client *http.Client) context.Context {
	ctx = oidc.ClientContext(ctx, client)
	return context.WithValue(ctx, oauth2.HTTPClient, client)
}

// boundedClient returns client with every response body limited to maxProviderBody bytes (a
// longer body reads as an error), so no provider answer can take unbounded memory.
func boundedClient(client *http.Client) *http.Client {
	if client == nil {
		client = outbound.NewClient(outbound.Options{})
	}
	c := *client
	base := c.Transport
	if base == nil {
		base = outbound.NewTransport(outbound.Options{})
	}
	c.Transport = limitTransport{base}
	return httpsOnlyRedirects(&c)
}

type limitTransport struct{ base http.RoundTripper }

func (t limitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		resp.Body = &limitedBody{rc: resp.Body, left: maxProviderBody}
	}
	return resp, err
}

// limitedBody reads at most left bytes, then fails.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

var errProviderBody = errors.New("the identity provider's answer is too large")

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, errProviderBody
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
