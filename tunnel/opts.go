package tunnel

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// bindOpts are the options of a Bind, decoded leniently (Go's decoder ignores the case of field
// names: Go agents send LocalURLScheme, Rust ones LocalUrlScheme). The module options are kept
// raw: each is either enforced (chain) or refused by name, never ignored.
type bindOpts struct {
	URL, Domain, Hostname, Subdomain, Addr string
	Auth                                   string
	ProxyProto                             int

	IPRestriction *struct {
		AllowCIDRs []string `json:"allow_cidrs"`
		DenyCIDRs  []string `json:"deny_cidrs"`
	}
	BasicAuth *struct {
		Credentials []struct {
			Username          string `json:"username"`
			CleartextPassword string `json:"cleartext_password"`
			HashedPassword    []byte `json:"hashed_password"`
		} `json:"credentials"`
	}

	MutualTLSAtAgent bool

	// env is what the traffic_policy option's stages need of the bind (not an option).
	env bindEnv
}

// bindEnv is what a bind's traffic policy needs beyond its document: the endpoint its
// endpoint.* variables read and its log records name (filled in once the bind's name is
// resolved, before it takes traffic), the data plane's policy log and outbound client.
type bindEnv struct {
	endpoint *trafficpolicy.Endpoint
	log      *enforce.PolicyLog
	outbound *http.Client
	// internal serves the policy's forward-internal actions.
	internal enforce.InternalEndpoints
	// terminateTLS is set for https and tls binds, whose listener applies the policy's
	// terminate-tls (tlsSettings).
	terminateTLS bool
}

// The traffic_policy option's builders, which take the bind's environment; set by
// bindopt_traffic_policy.go.
var (
	bindPolicyStage func(raw json.RawMessage, env bindEnv) (enforce.Stage, error)
	bindPolicyConn  func(raw json.RawMessage, env bindEnv) (*enforce.ConnPolicy, error)
)

// present reports whether a raw option was given: absent, null and "" (an unset traffic policy)
// all mean no.
func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != `""`
}

// moduleOptions maps the bind options that carry modules (lowercased: Go agents and Rust ones
// spell some differently) to the names of their modules, in the order their stages run.
var moduleOptions = []struct{ option, module string }{
	{"circuitbreaker", "circuit_breaker"}, {"oauth", "oauth"}, {"oidc", "oidc"},
	{"webhookverification", "webhook_verification"}, {"useragentfilter", "user_agent_filter"},
	{"requestheaders", "request_headers"}, {"responseheaders", "response_headers"},
	{"compression", "compression"}, {"websockettcpconverter", "websocket_tcp_converter"},
	{"mutualtlsca", "mutual_tls"}, {"mutualtlsatedge", "mutual_tls"}, {"tlstermination", "tls_termination"},
	{"policy", "policy"}, {"trafficpolicy", "traffic_policy"},
}

// tlsModules are the module options that set the endpoint's TLS (tlsSettings) rather than
// build a stage.
var tlsModules = map[string]bool{"mutual_tls": true, "tls_termination": true}

// optionFields returns a bind's options by lowercased name.
func optionFields(raw json.RawMessage) (map[string]json.RawMessage, *bindError) {
	fields := map[string]json.RawMessage{}
	if present(raw) {
		var byName map[string]json.RawMessage
		if err := json.Unmarshal(raw, &byName); err != nil {
			return nil, refuse(ep.AgentCodeBadBind, "The bind options are not a JSON object.")
		}
		for k, v := range byName {
			fields[strings.ToLower(k)] = v
		}
	}
	return fields, nil
}

// BindStageBuilder builds the stage of a module asked for in a bind's options, from the
// option's JSON (the agents' protobuf-shaped objects: snake_case keys, []byte as base64). Its
// error refuses the bind with ERR_NGROK_301, or with the code of an optionRefusal.
type BindStageBuilder func(raw json.RawMessage) (enforce.Stage, error)

// optionRefusal is a builder's error that carries its own refusal code: ngrok's code for that
// exact mistake (an unknown OAuth provider is 365), or ERR_NGROK_3208 for an option that is
// well formed but that this server cannot apply as given (say no managed OAuth application),
// so agents see the same code as for any other option edgeplane does not enforce.
type optionRefusal struct {
	code int
	msg  string
}

func (e *optionRefusal) Error() string { return e.msg }

// refusalCode is the code a builder's error refuses the bind with.
func refusalCode(err error) int {
	var r *optionRefusal
	if errors.As(err, &r) {
		return r.code
	}
	return ep.AgentCodeBadBind
}

// bindStages is the table of module options edgeplane enforces on agent endpoints beyond basic
// auth and IP restriction: one entry per module, registered from its own file
// (bindopt_<module>.go). Every option without an entry is refused by name.
var bindStages = map[string]BindStageBuilder{}

// registerBindStage adds a module's bind option builder; called from the init of its file.
func registerBindStage(module string, f BindStageBuilder) {
	if _, dup := bindStages[module]; dup {
		panic("tunnel: bind stage " + module + " registered twice")
	}
	bindStages[module] = f
}

// BindConnBuilder builds the connection stage of a module asked for in the options of a tcp or
// tls bind: there is no HTTP request to act on, so the module decides on each public connection
// before any byte is carried (as it does on TCP and TLS edges).
type BindConnBuilder func(raw json.RawMessage) (*enforce.ConnPolicy, error)

// bindConnStages is the table of modules that act on the connections of tcp and tls binds, by
// module name; a module without an entry is an HTTP module, refused on those binds.
var bindConnStages = map[string]BindConnBuilder{}

// registerBindConnStage adds a module's builder for tcp and tls binds; called from the init of
// its file, next to its registerBindStage.
func registerBindConnStage(module string, f BindConnBuilder) {
	if _, dup := bindConnStages[module]; dup {
		panic("tunnel: bind connection stage " + module + " registered twice")
	}
	bindConnStages[module] = f
}

// chain builds the stages of the options edgeplane enforces on plain endpoints (basic auth and
// IP restriction, including the legacy "user:pass" Auth, and the modules of bindStages) and
// refuses, by name, every option it does not enforce yet: a bind is never accepted with an
// option silently dropped. On tcp and tls binds a module of bindConnStages becomes the
// connection policy (policy) instead of an HTTP stage. Mutual TLS and TLS termination are not
// stages but the endpoint's TLS, built by tlsSettings.
func (o *bindOpts) chain(proto string, raw json.RawMessage) (*enforce.Chain, *enforce.ConnPolicy, *bindError) {
	fields, berr := optionFields(raw)
	if berr != nil {
		return nil, nil, berr
	}
	httpProto := proto == "http" || proto == "https"
	c := &enforce.Chain{}
	var policy *enforce.ConnPolicy
	for _, mo := range moduleOptions {
		v, ok := fields[mo.option]
		if !ok || !present(v) || tlsModules[mo.module] {
			continue
		}
		if mo.module == "traffic_policy" && !httpProto {
			cp, err := bindPolicyConn(v, o.env)
			if err != nil {
				return nil, nil, refuse(ep.AgentCodeBadBind, "%s: %v", mo.module, err)
			}
			policy = cp
			continue
		}
		if buildConn, ok := bindConnStages[mo.module]; ok && !httpProto {
			cp, err := buildConn(v)
			if err != nil {
				return nil, nil, refuse(ep.AgentCodeBadBind, "%s: %v", mo.module, err)
			}
			policy = cp
			continue
		}
		build, ok := bindStages[mo.module]
		if mo.module == "traffic_policy" {
			build = func(raw json.RawMessage) (enforce.Stage, error) { return bindPolicyStage(raw, o.env) }
		}
		if !ok && build == nil {
			return nil, nil, refuse(ep.AgentCodeUnsupportedOpt, "edgeplane does not enforce the %s option on agent endpoints yet; remove it from the endpoint's options (it would not be applied).", mo.module)
		}
		st, err := build(v)
		if err != nil {
			return nil, nil, refuse(refusalCode(err), "%s: %v", mo.module, err)
		}
		c.HTTP = append(c.HTTP, st)
	}
	if o.ProxyProto != 0 {
		return nil, nil, refuse(ep.AgentCodeUnsupportedOpt, "edgeplane does not send PROXY protocol headers yet; remove the proxy_proto option.")
	}
	if o.MutualTLSAtAgent {
		return nil, nil, refuse(ep.AgentCodeUnsupportedOpt, "edgeplane does not support mutual TLS terminated at the agent yet.")
	}
	if o.IPRestriction != nil && (len(o.IPRestriction.AllowCIDRs) > 0 || len(o.IPRestriction.DenyCIDRs) > 0) {
		f, err := enforce.NewIPFilter(o.IPRestriction.AllowCIDRs, o.IPRestriction.DenyCIDRs)
		if err != nil {
			return nil, nil, refuse(ep.AgentCodeBadBind, "ip_restriction: %v", err)
		}
		c.Conn = append(c.Conn, f)
	}
	var creds []enforce.BasicCredential
	if o.BasicAuth != nil {
		for _, cr := range o.BasicAuth.Credentials {
			creds = append(creds, enforce.BasicCredential{Username: cr.Username, CleartextPassword: cr.CleartextPassword, HashedPassword: cr.HashedPassword})
		}
	}
	if o.Auth != "" {
		user, pass, _ := strings.Cut(o.Auth, ":")
		creds = append(creds, enforce.BasicCredential{Username: user, CleartextPassword: pass})
	}
	if len(creds) > 0 || (o.BasicAuth != nil && o.BasicAuth.Credentials != nil) {
		if !httpProto {
			return nil, nil, refuse(ep.AgentCodeBadBind, "basic_auth applies to http and https endpoints only.")
		}
		b, err := enforce.NewBasicAuth(creds)
		if err != nil {
			return nil, nil, refuse(ep.AgentCodeBadBind, "basic_auth: %v", err)
		}
		c.HTTP = append([]enforce.Stage{b}, c.HTTP...) // authentication first
	}
	if len(c.HTTP) > 0 && !httpProto {
		return nil, nil, refuse(ep.AgentCodeBadBind, "%s applies to http and https endpoints only.", c.HTTP[0].Name())
	}
	if len(c.Conn) == 0 && len(c.HTTP) == 0 {
		return nil, policy, nil
	}
	return c, policy, nil
}

// hostname is the name the options ask for: URL (its host), Domain, Hostname, or Subdomain
// under the first service domain; "" when none is given.
func (o *bindOpts) hostname(proto string, st ep.Settings) (string, *bindError) {
	name := ""
	switch {
	case o.URL != "":
		u, err := url.Parse(o.URL)
		if err != nil || u.Host == "" {
			return "", refuse(ep.AgentCodeBadName, "The URL %q does not parse as scheme://host.", o.URL)
		}
		if u.Port() != "" && u.Port() != "443" && u.Port() != "80" {
			return "", refuse(ep.AgentCodeBadName, "The URL %q names port %s; edgeplane serves %s endpoints on its public listeners' ports.", o.URL, u.Port(), proto)
		}
		name = u.Hostname()
	case o.Domain != "":
		name = o.Domain
	case o.Hostname != "":
		name = o.Hostname
	case o.Subdomain != "":
		name = o.Subdomain + "." + st.ServiceDomains[0]
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if strings.Contains(name, "*") {
		return "", refuse(ep.AgentCodeBadName, "%q: an agent endpoint needs an exact name, not a wildcard.", name)
	}
	return name, nil
}
