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
	allow, deny []netip.Prefix
}

// NewIPFilter parses the allow and deny CIDRs; an error names the first that does not parse.
func NewIPFilter(allow, deny []string) (*IPFilter, error) {
	f := &IPFilter{}
	for _, spec := range []struct {
		list []string
		into *[]netip.Prefix
		name string
	}{{allow, &f.allow, "allow"}, {deny, &f.deny, "deny"}} {
		for _, c := range spec.list {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				if a, aerr := netip.ParseAddr(c); aerr == nil {
					p = netip.PrefixFrom(a, a.BitLen())
				} else {
					return nil, fmt.Errorf("%s CIDR %q does not parse", spec.name, c)
				}
			}
			*spec.into = append(*spec.into, p.Masked())
		}
	}
	return f, nil
}

// Name is the module's name, for error pages and logs.
func (f *IPFilter) Name() string { return "ip_restriction" }

// AllowConn applies the rules to the client address.
func (f *IPFilter) AllowConn(client netip.Addr) bool {
	client = client.Unmap()
	for _, p := range f.deny {
		if p.Contains(client) {
			return false
		}
	}
	for _, p := range f.allow {
		if p.Contains(client) {
			return true
		}
	}
	return len(f.allow) == 0
}
