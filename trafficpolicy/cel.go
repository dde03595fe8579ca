package trafficpolicy

import (
	"net/netip"
	"reflect"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// CostLimit bounds the work of one expression's evaluation (cel-go's cost units, roughly one
// per operation and per element a function walks). An expression that exceeds it fails, and
// the request with it.
const CostLimit = 100_000

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
// request's in the HTTP phases, the response's in on_http_response and on_event_stream_message
// (variables.go), the policy's own (vars, actions) and the macros everywhere.
func envFor(phase string) *cel.Env {
	envOnce.Do(func() {
		envs = map[string]*cel.Env{}
		for _, ph := range []string{OnTCPConnect, OnHTTPRequest, OnHTTPResponse, OnEventStreamMessage} {
			opts := append(declarations(ph), cidrMacros...)
			opts = append(opts, macros...)
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
// cost limit. It also returns what the expression reads (inspect).
func compile(env *cel.Env, expr string) (cel.Program, refs, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, refs{}, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, refs{}, errNotBool
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit))
	return prg, inspect(ast), err
}
