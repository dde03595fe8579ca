package enforce

import (
	"context"
	"fmt"
	"net/http"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The forward-internal action hands the request to an internal endpoint of the policy's own
// account (an agent's bind on a ".internal" name), whose stages (its own traffic policy
// included) then serve it: the client gets that endpoint's answer, no later action of the phase
// runs and the policy's own upstream gets nothing. The URL may interpolate; it names the
// endpoint's scheme, host and port. An endpoint that is not online (or another account's of
// the same name, which is never reached) is a failure: on_error halt (the default) answers 404
// ERR_NGROK_3200, continue lets the next actions run. A request forwarded more than
// maxForwardHops times (endpoints forwarding to each other) fails the same way, so a loop ends.

// InternalEndpoints serves requests on internal endpoints, for forward-internal. The ingress
// server implements it over the online endpoints of this replica and the others.
type InternalEndpoints interface {
	// ServeInternal serves r on the internal endpoint target of account, through the
	// endpoint's own stages, and reports false, having written nothing, when the account has
	// no such endpoint online.
	ServeInternal(w http.ResponseWriter, r *http.Request, account string, target trafficpolicy.Target) bool
	// InternalOnline reports whether account has the internal endpoint target online, here or
	// on another replica: forward-internal in on_tcp_connect asks before it hands the
	// connection over, so that on_error applies to an endpoint that is not.
	InternalOnline(account string, target trafficpolicy.Target) bool
}

// maxForwardHops bounds the internal endpoints one request passes through.
const maxForwardHops = 8

type forwardHopsKey struct{}

func init() {
	registerRequestAction("forward-internal", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.ForwardInternalConfig)
		if tp.opts.Internal == nil {
			return nil, fmt.Errorf("%s: forward-internal needs the data plane's internal endpoints, which this stage was built without", a.Path)
		}
		if tp.opts.Endpoint == nil || tp.opts.Endpoint.Account == "" {
			return nil, fmt.Errorf("%s: forward-internal needs the policy's account, which this stage was built without", a.Path)
		}
		url, err := trafficpolicy.CompileTemplate(a.Phase, c.URL)
		if err != nil {
			return nil, fmt.Errorf("%s.config.url: %v", a.Path, err)
		}
		internal, endpoint, halt := tp.opts.Internal, tp.opts.Endpoint, c.Halts()
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			err := func() error {
				s, err := url.Render(vars())
				if err != nil {
					return err
				}
				target, err := trafficpolicy.InternalURL(a.Phase, s)
				if err != nil {
					return err
				}
				hops, _ := r.Context().Value(forwardHopsKey{}).(int)
				if hops >= maxForwardHops {
					return fmt.Errorf("the request was forwarded through %d internal endpoints already", hops)
				}
				fr := r.WithContext(context.WithValue(r.Context(), forwardHopsKey{}, hops+1))
				if !internal.ServeInternal(w, fr, endpoint.Account, target) {
					return fmt.Errorf("the internal endpoint %s is offline", s)
				}
				return nil
			}()
			switch {
			case err == nil:
				return nil // the internal endpoint answered
			case halt:
				ErrorPage(w, r, http.StatusNotFound, 3200, fmt.Sprintf("The forward-internal action %s failed: %v", a.Path, err))
				return nil
			}
			return r
		}, nil
	})
}
