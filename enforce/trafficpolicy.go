package enforce

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// TrafficPolicy is the traffic_policy module of an HTTPS edge's route: the rules of the
// document's on_http_request phase run, in order, before the request goes upstream, and those
// of on_http_response when the response's final status is written. A rule runs its actions, in
// order, when every one of its expressions is true (a rule without expressions always runs);
// a terminating action (deny, custom-response, redirect, a refusing restrict-ips, rate-limit,
// verify-webhook or jwt-validation) answers the request and ends the phase.
//
// The actions applied are deny, custom-response, add-headers, remove-headers, redirect,
// url-rewrite, restrict-ips, rate-limit, verify-webhook, jwt-validation and compress-response in
// on_http_request, and add-headers, remove-headers, deny, custom-response (which replace the
// upstream's answer) and compress-response in on_http_response. CEL interpolation (${…}) is
// evaluated in header values, custom-response bodies, the to of redirect and url-rewrite and
// rate-limit's bucket keys. NewTrafficPolicy refuses a document using any other action, or
// interpolation where it is not evaluated (a regular expression, a webhook secret, a JWT
// setting), so the route fails closed naming what it cannot apply. The rules of on_tcp_connect
// run before those of on_http_request, on every request of the route or endpoint (it is only
// known once a request arrives), except on a request a forward-internal handed over: one that
// refuses closes the connection without an answer, and a forward-internal there hands the
// request to an internal http or https endpoint (serveForwarded). Expressions are compiled when the document is parsed, never per request; one that
// fails to evaluate answers 503 ERR_NGROK_3210 rather than being taken as true or false.
type TrafficPolicy struct {
	conn              *ConnPolicy
	request, response []policyRule
	// events are the rules of on_event_stream_message, run on each message of an event stream.
	events []eventRule
	opts   PolicyOptions
	// writer is set when an on_http_request action acts on the response (compress-response,
	// circuit-breaker, response-body-find-replace): every request then gets a policyWriter, as
	// it does when on_http_response has rules.
	writer bool
	// results is set when some expression or interpolation reads actions.*: only then do
	// actions record their results.
	results bool
	// bytes is set when some expression or interpolation reads conn.bytes_in or _out: the
	// listener counts the bytes of this policy's connections only then (ConnReads).
	bytes bool
	// ja4 is set when some expression or interpolation reads conn.tls.ja4_fingerprint: the
	// listener fingerprints the ClientHellos of this policy's connections only then.
	ja4 bool
	// accept is the Accept-Encoding the upstream is asked for ("identity" when a response
	// body is rewritten, so that it comes uncompressed); "" leaves the client's.
	accept string
}

// PolicyOptions is what a traffic policy's actions need beyond the document.
type PolicyOptions struct {
	// Outbound fetches jwt-validation's key sets and verify-webhook's SNS signing certificates
	// (the data plane's client, trusting the system roots plus --outbound-ca). Without it,
	// jwt-validation is refused when the stage is built and SNS certificates are fetched with
	// a client trusting the system roots only.
	Outbound *http.Client
	// Limiter returns the limiter of a rate-limit action, calling make for a new one when the
	// caller keeps none under key (the action's place in the document and its configuration).
	// The plan keeps limiters across its rebuilds this way, so a route's counts survive them;
	// nil makes a new limiter with each stage (an agent bind's live as long as the bind).
	Limiter func(key string, make func() *RateLimiter) *RateLimiter
	// Breaker returns the breaker of a circuit-breaker action the same way, so a route's
	// window and tripped state survive rebuilds; nil makes a new breaker with each stage.
	Breaker func(key string, make func() *Breaker) *Breaker
	// Endpoint is what the endpoint.* variables read and whose account and endpoint log
	// records name. A stage built before its bind's endpoint is known gets a pointer filled in
	// before the bind takes traffic.
	Endpoint *trafficpolicy.Endpoint
	// Log receives the log action's records, bounded per account; without it a policy with a
	// log action is refused when the stage is built.
	Log *PolicyLog
	// Internal serves forward-internal's requests on the account's internal endpoints (the
	// account is Endpoint's); without it a policy with forward-internal is refused when the
	// stage is built.
	Internal InternalEndpoints
	// SignIn is what the oauth and openid-connect actions need (the session key, managed
	// applications); without it (or without Outbound) a policy with one is refused when the
	// stage is built.
	SignIn *SignInOptions
	// TerminateTLS says the endpoint's listener applies the policy's terminate-tls action
	// (trafficpolicy.TerminateTLS) to its handshakes; the action itself then does nothing
	// more. Without it a policy with terminate-tls is refused when the stage is built.
	TerminateTLS bool
	// WAF is the engine of owasp-crs-request and owasp-crs-response, compiled once and shared
	// by every stage given it; without it a stage with such an action compiles one of its own.
	WAF *WAF
	// KeySets caches jwt-validation's key sets for every stage given it (the data plane's);
	// without it each stage keeps its own.
	KeySets *KeySets
	// OIDCProviders caches openid-connect's discovered providers for every stage given it (the
	// data plane's); without it each stage discovers its own.
	OIDCProviders *OIDCProviders
}

// policyRule is a rule with its actions made ready: each request action returns the request to
// carry on with, or nil when it answered; vars gives the request's variables (for CEL
// interpolation), computed once they are needed.
type policyRule struct {
	rule     *trafficpolicy.Rule
	request  []requestFunc
	response []responseFunc
}

type requestFunc func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request

// NewTrafficPolicy makes the stage of a parsed document with no options (see
// NewTrafficPolicyWith); an error names the first part of it edgeplane does not apply.
func NewTrafficPolicy(p *trafficpolicy.Policy) (*TrafficPolicy, error) {
	return NewTrafficPolicyWith(p, PolicyOptions{})
}

// NewTrafficPolicyWith makes the stage of a parsed document with what its actions need beyond
// it; an error names the first part of it edgeplane does not apply.
func NewTrafficPolicyWith(p *trafficpolicy.Policy, o PolicyOptions) (*TrafficPolicy, error) {
	if err := p.Unavailable(); err != nil {
		return nil, err
	}
	tp := &TrafficPolicy{opts: o, results: p.Reads("actions"), bytes: p.Reads("conn.bytes"),
		ja4: p.Reads("conn.tls.ja4_fingerprint")}
	if len(p.OnTCPConnect) > 0 {
		cp, err := newConnPolicy(p.OnTCPConnect, o, tp.results, "http")
		if err != nil {
			return nil, err
		}
		cp.ja4 = tp.ja4
		tp.conn = cp
	}
	for _, r := range p.OnHTTPRequest {
		pr := policyRule{rule: r}
		for _, a := range r.Actions {
			f, err := tp.requestAction(a)
			if err != nil {
				return nil, err
			}
			pr.request = append(pr.request, f)
		}
		tp.request = append(tp.request, pr)
	}
	for _, r := range p.OnHTTPResponse {
		pr := policyRule{rule: r}
		for _, a := range r.Actions {
			f, err := tp.responseAction(a)
			if err != nil {
				return nil, err
			}
			pr.response = append(pr.response, f)
		}
		tp.response = append(tp.response, pr)
	}
	if err := tp.buildEvents(p.OnEventStreamMessage); err != nil {
		return nil, err
	}
	forgetConfigs(p.OnHTTPRequest, p.OnHTTPResponse, p.OnEventStreamMessage)
	return tp, nil
}

// forgetConfigs drops the rules' actions once the stage has built their functions: those hold
// what they need in their own form (compiled templates, parsed CIDRs), while the actions and
// their configuration maps, kept alive by the rules the stage matches with, were a second copy
// of the document. For a 64 KiB document of restrict-ips rules they were two thirds of the
// stage's memory; a stage lives as long as the routing plan or the bind using it.
func forgetConfigs(phases ...[]*trafficpolicy.Rule) {
	for _, rules := range phases {
		for _, r := range rules {
			for _, a := range r.Actions {
				a.Config = nil // for a function that kept its action (for its Path)
			}
			r.Actions = nil
		}
	}
}

// Name is the module's name.
func (tp *TrafficPolicy) Name() string { return "traffic_policy" }

// Wrap runs the request phase, then next behind a writer that runs the response phase.
func (tp *TrafficPolicy) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp.conn != nil && !forwarded(r) {
			if v := tp.connect(r); !v.Allow {
				closeConnection(r) // HTTP/2: the whole connection, not only the stream
			} else if v.Forward != nil {
				tp.serveForwarded(w, r, v)
				return
			}
		}
		if len(tp.response) == 0 && !tp.writer && len(tp.events) == 0 {
			tp.serve(w, r, next)
			return
		}
		pw := &policyWriter{ResponseWriter: w, tp: tp, req: r}
		if len(tp.response) > 0 || len(tp.events) > 0 {
			pw.vars = tp.vars(r)
		}
		finished := false
		defer func() {
			if !finished {
				pw.settle(false) // a handler that panicked (an aborted proxy) counts as a failure
			}
		}()
		tp.serve(pw, r, next)
		// Not deferred: a handler that panics (a proxied body cut off) must not get a
		// well-formed compression trailer that would make the truncated body look complete.
		pw.finish()
		finished = true
		pw.settle(true)
	})
}

// serve runs the request phase's rules, then next unless an action answered.
func (tp *TrafficPolicy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var vars, carried map[string]any
	getVars := func() map[string]any {
		if vars == nil {
			vars = tp.vars(r)
			trafficpolicy.CarryState(carried, vars, true)
		}
		return vars
	}
	for _, pr := range tp.request {
		if pr.rule.Expressions != nil {
			ok, err := pr.rule.Match(getVars())
			if err != nil {
				policyFailed(w, r, err)
				return
			}
			if !ok {
				continue
			}
		}
		for _, act := range pr.request {
			if r = act(w, r, getVars); r == nil {
				return
			}
		}
		// Actions may have changed the request: later rules see the new one, with the state.
		if vars != nil {
			carried, vars = vars, nil
		}
	}
	if pw, ok := w.(*policyWriter); ok && pw.vars != nil {
		trafficpolicy.CarryState(carried, pw.vars, false) // action results reach the response phase
	}
	if tp.accept != "" { // a body to rewrite is asked for uncompressed; compress-response still sees the client's
		r = withOwnHeader(r)
		r.Header.Set("Accept-Encoding", tp.accept)
	}
	next.ServeHTTP(w, r)
}

// vars are the variables of a request, for the expressions.
func (tp *TrafficPolicy) vars(r *http.Request) map[string]any {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	vars := trafficpolicy.RequestVars(trafficpolicy.ConnVars(r.RemoteAddr, ""), r, scheme)
	if tp.opts.Endpoint != nil {
		trafficpolicy.SetEndpoint(vars, tp.opts.Endpoint)
	}
	if c := connOf(r); c != nil {
		trafficpolicy.SetConnStart(vars, c.Start)
		trafficpolicy.SetConn(vars, c)
	}
	return vars
}

// ConnReads reports whether the policy reads conn.bytes_in or conn.bytes_out, and whether it
// reads conn.tls.ja4_fingerprint, so that the listener counts the bytes or fingerprints the
// ClientHellos of its connections (Chain.ConnReads).
func (tp *TrafficPolicy) ConnReads() ConnReads { return ConnReads{Bytes: tp.bytes, JA4: tp.ja4} }

// policyFailed answers a request whose policy could not be evaluated.
func policyFailed(w http.ResponseWriter, r *http.Request, err error) {
	ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The traffic_policy of this endpoint could not be evaluated: "+err.Error())
}

// noInterpolation refuses CEL interpolation where edgeplane does not evaluate it yet (the
// regular expressions of redirect and url-rewrite).
func noInterpolation(a *trafficpolicy.Action, field, value string) error {
	if trafficpolicy.Interpolates(value) {
		return fmt.Errorf("%s.config.%s: CEL interpolation (${…}) in a regular expression is not applied yet", a.Path, field)
	}
	return nil
}

// notApplied is the error of an action edgeplane does not apply in a phase.
func notApplied(a *trafficpolicy.Action, phase string) error {
	return fmt.Errorf("%s: the %s action is not applied in %s yet", a.Path, a.Type, phase)
}

// requestBuilder makes an action of on_http_request ready to run from its decoded
// configuration (one of trafficpolicy's *Config types); tp is the stage being built (its
// options, and what the action needs of the stage).
type requestBuilder func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error)

// responseBuilder is requestBuilder for on_http_response.
type responseBuilder func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (responseFunc, error)

// requestActions and responseActions are the actions edgeplane applies in each HTTP phase: one
// entry per action type, registered from this file or from the action's own
// (trafficpolicy_<action>.go). A type without an entry fails the stage's build, naming it.
var (
	requestActions  = map[string]requestBuilder{}
	responseActions = map[string]responseBuilder{}
)

// registerRequestAction and registerResponseAction add an action's builder for a phase; called
// from the init of its file.
func registerRequestAction(typ string, f requestBuilder) {
	if _, dup := requestActions[typ]; dup {
		panic("enforce: request action " + typ + " registered twice")
	}
	requestActions[typ] = f
}

func registerResponseAction(typ string, f responseBuilder) {
	if _, dup := responseActions[typ]; dup {
		panic("enforce: response action " + typ + " registered twice")
	}
	responseActions[typ] = f
}

// requestAction makes an action of on_http_request ready to run.
func (tp *TrafficPolicy) requestAction(a *trafficpolicy.Action) (requestFunc, error) {
	build, ok := requestActions[a.Type]
	if !ok || !trafficpolicy.Implemented(a.Type) {
		return nil, notApplied(a, trafficpolicy.OnHTTPRequest)
	}
	cfg, err := a.Decode()
	if err != nil {
		return nil, err
	}
	return build(a, cfg, tp)
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// headerTemplates are the headers of an action, their values with CEL interpolation compiled,
// in name order.
type headerTemplates []struct {
	name  string
	value *trafficpolicy.Template
}

// compileCustomResponse compiles a custom-response's body and headers (both may interpolate)
// and settles its status, for either HTTP phase.
func compileCustomResponse(a *trafficpolicy.Action, c *trafficpolicy.CustomResponseConfig) (*trafficpolicy.Template, headerTemplates, int, error) {
	body, err := trafficpolicy.CompileTemplate(a.Phase, c.Body+c.Content)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%s.config: %v", a.Path, err)
	}
	headers, err := compileHeaders(a, c.Headers)
	if err != nil {
		return nil, nil, 0, err
	}
	return body, headers, orDefault(c.StatusCode, http.StatusOK), nil
}

func compileHeaders(a *trafficpolicy.Action, h map[string]string) (headerTemplates, error) {
	var hs headerTemplates
	for _, name := range slices.Sorted(maps.Keys(h)) {
		t, err := trafficpolicy.CompileTemplate(a.Phase, h[name])
		if err != nil {
			return nil, fmt.Errorf("%s.config.headers: %v", a.Path, err)
		}
		hs = append(hs, struct {
			name  string
			value *trafficpolicy.Template
		}{name, t})
	}
	return hs, nil
}

// render evaluates each value and passes the header to set.
func (hs headerTemplates) render(vars map[string]any, set func(name, value string)) error {
	for _, h := range hs {
		v, err := h.value.Render(vars)
		if err != nil {
			return err
		}
		set(h.name, v)
	}
	return nil
}

// withOwnHeader gives a request a header map of its own before an action edits it: the
// caller's request may share it.
func withOwnHeader(r *http.Request) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	r2.Header = r.Header.Clone()
	if r2.Header == nil {
		r2.Header = http.Header{}
	}
	return r2
}

// removeHeaders deletes names, in any case.
func removeHeaders(h http.Header, names []string) {
	for _, name := range names {
		for k := range h {
			if strings.EqualFold(k, name) {
				delete(h, k)
			}
		}
	}
}

// compileOptional compiles a pattern the configuration's check already compiled; empty is nil.
func compileOptional(expr string) *regexp.Regexp {
	if expr == "" {
		return nil
	}
	return regexp.MustCompile(expr)
}

// rewrite replaces every match of from in s with to ($1 for a group); a nil from replaces the
// whole of s. It reports false when from does not match.
func rewrite(from *regexp.Regexp, s, to string) (string, bool) {
	if from == nil {
		return to, true
	}
	if !from.MatchString(s) {
		return "", false
	}
	return from.ReplaceAllString(s, to), true
}

// fullURL is the request's URL as the client asked for it: scheme, host, path and query.
func fullURL(r *http.Request) string {
	u := *r.URL
	u.Scheme, u.Host = "http", r.Host
	if r.TLS != nil {
		u.Scheme = "https"
	}
	return u.String()
}

// matches are the groups of from's first match in s (the whole match first), for the results of
// redirect and url-rewrite; none when from is nil or does not match.
func matches(from *regexp.Regexp, s string) []string {
	if from == nil {
		return []string{}
	}
	m := from.FindStringSubmatch(s)
	if m == nil {
		return []string{}
	}
	return m
}

// decide is AllowConn with the CIDR that decided ("" when none did: no allow list).
func (f *IPFilter) decide(client netip.Addr) (bool, string) {
	client = client.Unmap()
	for _, list := range f.deny {
		for _, p := range list {
			if p.Contains(client) {
				return false, p.String()
			}
		}
	}
	for _, list := range f.allow {
		for _, p := range list {
			if p.Contains(client) {
				return true, p.String()
			}
		}
	}
	return len(f.allow) == 0, ""
}
