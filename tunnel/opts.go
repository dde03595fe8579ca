package tunnel

import (
	"encoding/json"
	"net/url"
	"strings"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/plan"
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

	// env is what the modules' builders get of the bind (not an option).
	env plan.BindEnv
}

// present reports whether a raw option was given: absent, null and "" (an unset traffic policy)
// all mean no.
func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != `""`
}

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

// chain builds the stages of the options edgeplane enforces on plain endpoints (basic auth and
// IP restriction, including the legacy "user:pass" Auth, and the modules of plan's module table)
// and refuses, by name, every option it does not enforce yet: a bind is never accepted with an
// option silently dropped. On tcp and tls binds a module acting on connections becomes the
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
	for _, bo := range plan.BindOptions() {
		v, ok := fields[bo.Option]
		if !ok || !present(v) || bo.Module.Structural() {
			continue
		}
		if bo.Module.OnConnections() && !httpProto {
			cp, err := bo.Module.BindConn(v, o.env)
			if err != nil {
				return nil, nil, refuse(ep.AgentCodeBadBind, "%s: %v", bo.Module, err)
			}
			policy = cp
			continue
		}
		if !bo.Module.OnBinds() {
			return nil, nil, refuse(ep.AgentCodeUnsupportedOpt, "edgeplane does not enforce the %s option on agent endpoints yet; remove it from the endpoint's options (it would not be applied).", bo.Module)
		}
		st, err := bo.Module.Bind(v, o.env)
		if err != nil {
			return nil, nil, refuse(plan.RefusalCode(err), "%s: %v", bo.Module, err)
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
