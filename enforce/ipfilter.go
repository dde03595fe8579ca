package enforce

import (
	"fmt"
	"net/netip"
)

// IPFilter is the ip_restriction module (and an agent bind's IPRestriction option): rules are
// CIDRs to allow and to deny, matched against the real client address. The decision, in order:
// an address matching any deny rule is refused; else one matching any allow rule is admitted;
// else it is refused when there is at least one allow rule, and admitted when there is none.
// IPv4 clients arriving as IPv4-mapped IPv6 addresses are matched as IPv4.
type IPFilter struct {
	// allow and deny are lists of CIDR lists: a filter joined from others (JoinIPFilters) shares
	// their lists instead of copying them. Only non-empty lists are kept.
	allow, deny [][]netip.Prefix
}

// NewIPFilter parses the allow and deny CIDRs; an error names the first that does not parse.
func NewIPFilter(allow, deny []string) (*IPFilter, error) {
	f := &IPFilter{}
	for _, spec := range []struct {
		list []string
		into *[][]netip.Prefix
		name string
	}{{allow, &f.allow, "allow"}, {deny, &f.deny, "deny"}} {
		if len(spec.list) == 0 {
			continue
		}
		prefixes := make([]netip.Prefix, 0, len(spec.list))
		for _, c := range spec.list {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				if a, aerr := netip.ParseAddr(c); aerr == nil {
					p = netip.PrefixFrom(a, a.BitLen())
				} else {
					return nil, fmt.Errorf("%s CIDR %q does not parse", spec.name, c)
				}
			}
			prefixes = append(prefixes, p.Masked())
		}
		*spec.into = [][]netip.Prefix{prefixes}
	}
	return f, nil
}

// JoinIPFilters returns the filter of the union of the filters' rules: an address denied by any
// is refused, else one allowed by any is admitted, else it is refused when any has an allow
// rule. The rules are shared, not copied: the routing plan joins the filters of a module's IP
// policies, each parsed once, and routes referring to the same large policies (32 policies of
// 1,000 rules allowed per module) held a copy of every rule each, about a megabyte per route.
func JoinIPFilters(fs ...*IPFilter) *IPFilter {
	j := &IPFilter{}
	for _, f := range fs {
		j.allow = append(j.allow, f.allow...)
		j.deny = append(j.deny, f.deny...)
	}
	return j
}

// Name is the module's name, for error pages and logs.
func (f *IPFilter) Name() string { return "ip_restriction" }

// AllowConn applies the rules to the client address.
func (f *IPFilter) AllowConn(client netip.Addr) bool {
	client = client.Unmap()
	for _, list := range f.deny {
		for _, p := range list {
			if p.Contains(client) {
				return false
			}
		}
	}
	for _, list := range f.allow {
		for _, p := range list {
			if p.Contains(client) {
				return true
			}
		}
	}
	return len(f.allow) == 0
}
