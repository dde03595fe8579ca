package tunnel

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// Internal endpoints: a bind whose name ends in ".internal" (ngrok's internal binding) is
// registered under a name scoped to its account (ep.InternalEndpointKey), which no public
// request can name: only a forward-internal action of a traffic policy of the same account
// reaches it. It needs no reservation (the name is the account's own) and its URL may name any
// port, which is part of its name: the public listeners' ports do not serve it. An internal tcp
// endpoint (tcp://name.internal:port) opens no port either: its port is only part of its name,
// so it takes no TCP port of the account's quota.

// internalBinding reports whether the bind asks for an internal endpoint: a name ending in
// ".internal", or the internal binding. It refuses a binding edgeplane does not know, more than
// one, and, with ngrok's code, the internal binding on another name or the public binding on an
// internal one.
func internalBinding(m *bindMsg, o *bindOpts) (bool, *bindError) {
	name := o.rawHost()
	internal := ep.IsInternalHost(name)
	binding := ""
	switch len(m.Extra.Bindings) {
	case 0:
	case 1:
		binding = strings.ToLower(m.Extra.Bindings[0])
	default:
		return false, refuse(ep.AgentCodeBadBind, "An endpoint takes one binding, got %d.", len(m.Extra.Bindings))
	}
	switch binding {
	case "":
	case "public":
		if internal {
			return false, refuse(ep.AgentCodeInternalBinding, "Failed to start endpoint with %s. Endpoints whose url ends in \".internal\" must have the \"internal\" binding.", name)
		}
	case "internal":
		if !internal {
			return false, refuse(ep.AgentCodeInternalBinding, "Failed to start endpoint with %s. Endpoints with a \"internal\" binding must have a url that ends in \".internal\".", name)
		}
	default:
		return false, refuse(ep.AgentCodeBadBind, "The binding %q is not served by edgeplane: use public or internal.", m.Extra.Bindings[0])
	}
	return internal, nil
}

// rawHost is the hostname the options name (URL, Domain, Hostname, or a tcp bind's Addr),
// lowercase, "" for none.
func (o *bindOpts) rawHost() string {
	name := o.Domain
	if name == "" {
		name = o.Hostname
	}
	if name == "" && o.Addr != "" {
		if h, _, err := net.SplitHostPort(o.Addr); err == nil {
			name = h
		}
	}
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err == nil {
			name = u.Hostname()
		}
	}
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// resolveInternal works out an internal endpoint's name and port and checks them against the
// credential's ACL; the store and the registry then keep its account-scoped name.
func (s *session) resolveInternal(t *Tunnel, o *bindOpts) *bindError {
	name, port := o.rawHost(), defaultPort(t.proto)
	if o.URL == "" && o.Addr != "" && t.proto == "tcp" {
		o.URL = "tcp://" + o.Addr // an internal tcp address, as ngrok-go's WithRemoteAddr gives it
	}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || u.Host == "" {
			return refuse(ep.AgentCodeBadName, "The URL %q does not parse as scheme://host.", o.URL)
		}
		if u.Scheme != t.proto {
			return refuse(ep.AgentCodeBadName, "The URL %q does not have the endpoint's scheme %s.", o.URL, t.proto)
		}
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return refuse(ep.AgentCodeBadName, "The URL %q names no valid port.", o.URL)
			}
			port = n
		}
	}
	if port == 0 {
		return refuse(ep.AgentCodeBadName, "The internal tcp endpoint %q names no port: use tcp://%s:PORT.", name, name)
	}
	if !ep.ValidHostname(name, false) {
		return refuse(ep.AgentCodeBadName, "%q is not a valid hostname.", name)
	}
	if ok, _ := ep.ACLPermits(s.currentACL(), ep.ACLTarget{Name: name}); !ok {
		return refuse(ep.AgentCodeACLName, "The credential ACL policy does not permit binding this name.\nCredential ID: %s\nName: %s", s.cred.ID, name)
	}
	t.internal, t.host, t.port = true, name, port
	t.url = internalURL(t.proto, name, port)
	return nil
}

// internalURL is an internal endpoint's URL: the port only when not the scheme's default.
func internalURL(proto, host string, port int) string {
	if port == defaultPort(proto) {
		return proto + "://" + host
	}
	return proto + "://" + host + ":" + strconv.Itoa(port)
}

// defaultPort is the port of a URL of the scheme that names none; 0 for tcp, which has none.
func defaultPort(scheme string) int {
	switch scheme {
	case "http":
		return 80
	case "tcp":
		return 0
	}
	return 443
}
