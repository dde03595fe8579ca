package trafficpolicy

import (
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// CostLimit bounds the work of one expression's evaluation (cel-go's cost units, roughly one
// per operation and per element a function walks). An expression that exceeds it fails, and
// the request with it.
const CostLimit = 100_000

// The variables expressions may use, as ngrok documents them. Header and query parameter maps
// have lowercased header names as keys and every value of the name as a list.
var (
	connVars = map[string]*cel.Type{
		"conn.client_ip":   cel.StringType,
		"conn.client_port": cel.IntType,
		"conn.server_ip":   cel.StringType,
		"conn.server_port": cel.IntType,
	}
	requestVars = map[string]*cel.Type{
		"req.method":           cel.StringType,
		"req.url":              cel.StringType,
		"req.url.scheme":       cel.StringType,
		"req.url.authority":    cel.StringType,
		"req.url.host":         cel.StringType,
		"req.url.path":         cel.StringType,
		"req.url.query":        cel.StringType,
		"req.url.query_params": cel.MapType(cel.StringType, cel.ListType(cel.StringType)),
		"req.host":             cel.StringType,
		"req.headers":          cel.MapType(cel.StringType, cel.ListType(cel.StringType)),
		"req.trailers":         cel.MapType(cel.StringType, cel.ListType(cel.StringType)),
		"req.content_length":   cel.IntType,
		"req.content_type":     cel.StringType,
		"req.content_type.raw": cel.StringType,
	}
	responseVars = map[string]*cel.Type{
		"res.status_code":    cel.IntType,
		"res.headers":        cel.MapType(cel.StringType, cel.ListType(cel.StringType)),
		"res.content_length": cel.IntType,
	}
)

// cidrMacros are ngrok's utility macros inCidrRange(ip, cidr) and inCidrRanges(ip, cidrs): whether
// an address is in a CIDR range, or in any of a list of them. An invalid range (or address)
// matches nothing; IPv4-mapped IPv6 addresses match as IPv4.
var cidrMacros = []cel.EnvOption{
	cel.Function("inCidrRange", cel.Overload("inCidrRange_string_string",
		[]*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
		cel.BinaryBinding(func(ip, cidr ref.Val) ref.Val {
			s, _ := cidr.Value().(string)
			return types.Bool(inCIDRs(ip, []string{s}))
		}))),
	cel.Function("inCidrRanges", cel.Overload("inCidrRanges_string_list",
		[]*cel.Type{cel.StringType, cel.ListType(cel.StringType)}, cel.BoolType,
		cel.BinaryBinding(func(ip, cidrs ref.Val) ref.Val {
			list, err := cidrs.ConvertToNative(reflect.TypeFor[[]string]())
			if err != nil {
				return types.False
			}
			return types.Bool(inCIDRs(ip, list.([]string)))
		}))),
}

// inCIDRs reports whether the address ip (a CEL string) is in any of cidrs.
func inCIDRs(ip ref.Val, cidrs []string) bool {
	s, _ := ip.Value().(string)
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

var (
	envOnce sync.Once
	envs    map[string]*cel.Env
)

// envFor is the CEL environment of a phase: the connection's variables everywhere, the
// request's in the HTTP phases, the response's in on_http_response.
func envFor(phase string) *cel.Env {
	envOnce.Do(func() {
		envs = map[string]*cel.Env{}
		for _, ph := range []string{OnTCPConnect, OnHTTPRequest, OnHTTPResponse} {
			var opts []cel.EnvOption
			add := func(vars map[string]*cel.Type) {
				for name, t := range vars {
					opts = append(opts, cel.Variable(name, t))
				}
			}
			opts = append(opts, cidrMacros...)
			add(connVars)
			if ph != OnTCPConnect {
				add(requestVars)
			}
			if ph == OnHTTPResponse {
				add(responseVars)
			}
			env, err := cel.NewEnv(opts...)
			if err != nil {
				panic("trafficpolicy: the CEL environment: " + err.Error())
			}
			envs[ph] = env
		}
	})
	return envs[phase]
}

// compile type-checks an expression, which must be a bool, and plans its evaluation with the
// cost limit.
func compile(env *cel.Env, expr string) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, errNotBool
	}
	return env.Program(ast, cel.CostLimit(CostLimit))
}

// ConnVars are the variables of a connection: the client's and the listener's addresses.
func ConnVars(client, server string) map[string]any {
	vars := map[string]any{}
	host, port, _ := net.SplitHostPort(client)
	if ap, err := netip.ParseAddrPort(client); err == nil {
		host = ap.Addr().Unmap().String()
	}
	p, _ := strconv.Atoi(port)
	vars["conn.client_ip"], vars["conn.client_port"] = host, int64(p)
	host, port, _ = net.SplitHostPort(server)
	p, _ = strconv.Atoi(port)
	vars["conn.server_ip"], vars["conn.server_port"] = host, int64(p)
	return vars
}

// RequestVars adds a request's variables to the connection's (vars is changed and returned).
// scheme is the public scheme (https on edges), the host the request's Host.
func RequestVars(vars map[string]any, r *http.Request, scheme string) map[string]any {
	u := *r.URL
	u.Scheme, u.Host = scheme, r.Host
	vars["req.method"] = r.Method
	vars["req.url"] = u.String()
	vars["req.url.scheme"] = scheme
	vars["req.url.authority"] = r.Host
	vars["req.url.host"] = hostOnly(r.Host)
	vars["req.url.path"] = r.URL.Path
	vars["req.url.query"] = r.URL.RawQuery
	vars["req.url.query_params"] = map[string][]string(r.URL.Query())
	vars["req.host"] = r.Host
	vars["req.headers"] = lowerKeys(r.Header)
	vars["req.trailers"] = map[string][]string{}
	vars["req.content_length"] = r.ContentLength
	ct := r.Header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	vars["req.content_type"] = strings.ToLower(strings.TrimSpace(mt))
	vars["req.content_type.raw"] = ct
	return vars
}

// ResponseVars adds a response's variables (its status and headers as the upstream wrote them).
func ResponseVars(vars map[string]any, status int, h http.Header) map[string]any {
	vars["res.status_code"] = int64(status)
	vars["res.headers"] = lowerKeys(h)
	n := int64(-1)
	if v, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil {
		n = v
	}
	vars["res.content_length"] = n
	return vars
}

func lowerKeys(h http.Header) map[string][]string {
	m := make(map[string][]string, len(h))
	for k, v := range h {
		k = strings.ToLower(k)
		m[k] = append(m[k], v...)
	}
	return m
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
