package enforce

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// CEL interpolation in the sign-in actions' client_id and client_secret, as ngrok documents it:
// both are rendered on each request the action runs on, from that request's variables (req.*,
// conn.*, vars.* set earlier in the phase, endpoint.*, time.*, actions.*). Each application
// rendered gets a sign-in stage of its own, kept by the action (so by one account's policy,
// never shared with another's), at most maxSignInApps of them.
//
// A sign-in spans requests: the redirect to the provider, the callback, and every request of
// the session. Each request renders the application again, and the sign-in is bound to the one
// it began with: the session and sign-in cookies are sealed with the client_id (as the modules'
// are), so a callback or a session whose request renders another client_id opens neither, and
// the sign-in cookie holds a digest of both values, so a callback rendering another
// client_secret is refused (400 ERR_NGROK_5211) rather than finished with it. A value that
// fails to render, renders empty or renders longer than the limit answers 503 ERR_NGROK_3900
// naming the field; secrets.get, which reads ngrok's vaults, fails the policy closed when it is
// built (Policy.Unavailable).

// maxSignInApps bounds the applications one action keeps a stage for; past it the oldest is
// dropped (made again when a request renders it: sessions stay valid, as they are sealed with
// the data plane's key and the client_id, not with the stage).
const maxSignInApps = 32

// maxRenderedApp bounds a rendered client_id or client_secret, as the literal ones are.
const maxRenderedApp = 4096

// appTemplates are an action's client_id and client_secret: a template each when it
// interpolates, else the literal.
type appTemplates struct {
	id, secret         *trafficpolicy.Template
	literal            OAuthApp
	action, path, auth string
	build              func(OAuthApp) (Stage, error)

	mu     sync.Mutex
	stages map[string]Stage // by appDigest
	order  []string
}

// signInApps makes the action of a sign-in whose application is c's client_id and
// client_secret, built by build: a literal application gets its stage now; one that
// interpolates gets its stages as requests render it.
func signInApps(a *trafficpolicy.Action, c *trafficpolicy.SignInConfig, build func(OAuthApp) (Stage, error)) (requestFunc, error) {
	t := &appTemplates{literal: OAuthApp{ClientID: c.ClientID, ClientSecret: c.ClientSecret}, action: a.Type, path: a.Path,
		auth: c.AuthID, build: build, stages: map[string]Stage{}}
	for field, v := range map[string]string{"client_id": c.ClientID, "client_secret": c.ClientSecret} {
		if !trafficpolicy.Interpolates(v) {
			continue
		}
		tpl, err := trafficpolicy.CompileTemplate(a.Phase, v)
		if err != nil {
			return nil, fmt.Errorf("%s.config.%s: %v", a.Path, field, err)
		}
		if field == "client_id" {
			t.id = tpl
		} else {
			t.secret = tpl
		}
	}
	if t.id == nil && t.secret == nil {
		st, err := build(t.literal)
		if err != nil {
			return nil, fmt.Errorf("%s.config: %v", a.Path, err)
		}
		return signInAction(st, c.AuthID), nil
	}
	return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
		st := t.stage(w, r, vars())
		if st == nil {
			return nil
		}
		return signInAction(st, t.auth)(w, r, vars)
	}, nil
}

// stage renders the application for a request's variables and returns its sign-in stage, or
// nil when it answered the request (a value that does not render).
func (t *appTemplates) stage(w http.ResponseWriter, r *http.Request, vars map[string]any) Stage {
	app := t.literal
	for _, f := range []struct {
		name string
		tpl  *trafficpolicy.Template
		out  *string
	}{{"client_id", t.id, &app.ClientID}, {"client_secret", t.secret, &app.ClientSecret}} {
		if f.tpl == nil {
			continue
		}
		v, err := f.tpl.Render(vars)
		switch {
		case err != nil:
		case v == "":
			err = fmt.Errorf("it rendered empty")
		case len(v) > maxRenderedApp:
			err = fmt.Errorf("it rendered %d characters, more than %d", len(v), maxRenderedApp)
		}
		if err != nil {
			ErrorPage(w, r, http.StatusServiceUnavailable, 3900, fmt.Sprintf("CEL interpolation was unsuccessful in action %s field %s (%s): %v", t.action, f.name, t.path, err))
			return nil
		}
		*f.out = v
	}
	key := appDigest(app)
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.stages[key]; ok {
		return st
	}
	st, err := t.build(app)
	if err != nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, fmt.Sprintf("The %s action (%s) cannot sign in with the application it rendered: %v", t.action, t.path, err))
		return nil
	}
	if si, ok := st.(*signIn); ok {
		si.app = key
	}
	if len(t.order) >= maxSignInApps {
		delete(t.stages, t.order[0])
		t.order = t.order[1:]
	}
	t.stages[key] = st
	t.order = append(t.order, key)
	return st
}

// appDigest names an application by both its values without holding the secret in the clear:
// the key of its stage, and what a sign-in cookie records of the application it began with.
func appDigest(app OAuthApp) string {
	sum := sha256.Sum256([]byte(app.ClientID + "\x00" + app.ClientSecret))
	return hex.EncodeToString(sum[:16])
}
