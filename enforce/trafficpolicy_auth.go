package enforce

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The basic-auth and circuit-breaker actions of on_http_request.
//
// basic-auth admits a request whose Authorization: Basic credentials are one of its pairs
// (compared as SHA-256 digests in constant time) and answers any other 401 ERR_NGROK_3401 with
// a Basic challenge naming the realm (ngrok by default); enforce: false lets it go on. When some
// rule reads them, actions.ngrok.basic_auth.credentials.presented, .username and .authorized
// are recorded. Credentials with CEL interpolation are rendered per request when no literal one
// matched, and one that does not render to user:password with a password of 8 to 128
// characters fails the request 503 ERR_NGROK_3900 rather than admit or refuse on a broken
// credential.
//
// circuit-breaker counts the outcomes of the requests it lets through (a 5xx answer, or a
// handler that never finished, is a failure) in a rolling window of ten buckets; once the window
// holds volume_threshold requests of which the share error_threshold failed, it refuses every
// request 503 ERR_NGROK_3202 for tripped_duration, then lets one probe through whose outcome
// closes or reopens it (the circuit_breaker module's breaker). enforce: false never refuses. A
// route's breaker lives across plan rebuilds while the action's place and configuration are
// unchanged (PolicyOptions.Breaker); each route and each agent bind has its own.
func init() {
	registerRequestAction("basic-auth", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.BasicAuthConfig)
		type cred struct {
			user string
			sum  [32]byte
			tpl  *trafficpolicy.Template
		}
		var creds []cred
		for i, s := range c.Credentials {
			t, err := trafficpolicy.CompileTemplate(a.Phase, s)
			if err != nil {
				return nil, fmt.Errorf("%s.config.credentials[%d]: %v", a.Path, i, err)
			}
			if !t.Static() {
				creds = append(creds, cred{tpl: t})
				continue
			}
			user, pass, _ := strings.Cut(s, ":")
			creds = append(creds, cred{user: user, sum: sha256.Sum256([]byte(pass))})
		}
		realm := c.Realm
		if realm == "" {
			realm = "ngrok"
		}
		challenge := `Basic realm=` + strconv.Quote(realm) + `, charset="UTF-8"`
		enforced, results := c.Enforced(), tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			user, pass, presented := r.BasicAuth()
			sum := sha256.Sum256([]byte(pass))
			authorized := false
			// Every credential is compared, in constant time, whatever matched before; the
			// interpolated ones are rendered only when no literal one matched.
			match := func(cu string, csum [32]byte) {
				if presented && subtle.ConstantTimeCompare([]byte(user), []byte(cu))&subtle.ConstantTimeCompare(sum[:], csum[:]) == 1 {
					authorized = true
				}
			}
			for _, cr := range creds {
				if cr.tpl == nil {
					match(cr.user, cr.sum)
				}
			}
			for _, cr := range creds {
				if cr.tpl == nil || authorized {
					continue
				}
				s, err := cr.tpl.Render(vars())
				if err == nil {
					err = trafficpolicy.CheckCredential(s)
				}
				if err != nil {
					ErrorPage(w, r, http.StatusServiceUnavailable, 3900, fmt.Sprintf("CEL interpolation was unsuccessful in action basic-auth field credentials (%s): %v", a.Path, err))
					return nil
				}
				cu, cp, _ := strings.Cut(s, ":")
				match(cu, sha256.Sum256([]byte(cp)))
			}
			if results {
				trafficpolicy.SetResult(vars(), "basic_auth", map[string]any{"credentials": map[string]any{
					"presented": presented, "username": user, "authorized": authorized}})
			}
			if authorized || !enforced {
				return r
			}
			w.Header().Set("WWW-Authenticate", challenge)
			ErrorPage(w, r, http.StatusUnauthorized, 3401, "This endpoint requires a username and password.")
			return nil
		}, nil
	})
	registerRequestAction("circuit-breaker", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.CircuitBreakerConfig)
		if !c.Enforced() {
			return func(_ http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request { return r }, nil
		}
		threshold, volume, window, tripped := c.Settings()
		bc := BreakerConfig{Tripped: tripped, Window: window, Buckets: 10, Volume: int(volume), Threshold: threshold}
		fresh := func() *Breaker { return newBreaker(bc) }
		var b *Breaker
		if tp.opts.Breaker != nil {
			cfgJSON, _ := json.Marshal(c)
			b = tp.opts.Breaker(a.Path+" "+string(cfgJSON), fresh)
		} else {
			b = fresh()
		}
		tp.writer = true
		return func(w http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request {
			admitted, probe := b.admit()
			if !admitted {
				ErrorPage(w, r, http.StatusServiceUnavailable, 3202, "The circuit breaker of this endpoint's traffic policy is open: its upstream failed too often, so requests are refused for a while to let it recover.")
				return nil
			}
			if pw, ok := w.(*policyWriter); ok {
				pw.outcomes = append(pw.outcomes, func(status int, finished bool) { b.record(!finished || status >= 500, probe) })
			}
			return r
		}, nil
	})
}
