// Package outbound is the HTTP client edgeplane fetches the URLs an account's configuration
// gives with (JSON Web Key Sets, OpenID discovery, token and userinfo endpoints, the
// http-request action, SNS signing certificates). Those URLs are chosen by tenants, so without a
// guard any account could make edgeplane reach the operator's own network: its loopback
// services, private addresses, or a cloud's metadata service at 169.254.169.254. The guard
// checks the address of every connection the client's dialer makes, after name resolution, so
// a redirect or a name that resolves differently on the second look (DNS rebinding) is checked
// like the first request.
package outbound

import "net/netip"

// special is one range of addresses that are not public, with the class named in refusals.
type special struct {
	prefix netip.Prefix
	class  string
}

// Classes of non-public addresses, as refusals name them.
const (
	ClassUnspecified   = "unspecified"
	ClassLoopback      = "loopback"
	ClassPrivate       = "private"
	ClassLinkLocal     = "link-local"
	ClassShared        = "shared (carrier-grade NAT)"
	ClassMulticast     = "multicast"
	ClassBroadcast     = "broadcast"
	ClassDocumentation = "documentation"
	ClassBenchmarking  = "benchmarking"
	ClassReserved      = "reserved"
)

// specials4 are the IPv4 ranges of IANA's special-purpose registry that no public service
// lives at (RFC 6890 and its updates); the 192.0.0.0/24 protocol assignments are reserved.
var specials4 = mustSpecials(
	"0.0.0.0/8", ClassUnspecified,
	"10.0.0.0/8", ClassPrivate,
	"100.64.0.0/10", ClassShared,
	"127.0.0.0/8", ClassLoopback,
	"169.254.0.0/16", ClassLinkLocal,
	"172.16.0.0/12", ClassPrivate,
	"192.0.0.0/24", ClassReserved,
	"192.0.2.0/24", ClassDocumentation,
	"192.88.99.0/24", ClassReserved,
	"192.168.0.0/16", ClassPrivate,
	"198.18.0.0/15", ClassBenchmarking,
	"198.51.100.0/24", ClassDocumentation,
	"203.0.113.0/24", ClassDocumentation,
	"224.0.0.0/4", ClassMulticast,
	"255.255.255.255/32", ClassBroadcast,
	"240.0.0.0/4", ClassReserved,
)

// specials6 are the IPv6 ranges that are not public. Ranges embedding an IPv4 address
// (IPv4-mapped, NAT64, 6to4) are classified by that address instead (see Classify).
var specials6 = mustSpecials(
	"::/128", ClassUnspecified,
	"::1/128", ClassLoopback,
	"::/96", ClassReserved, // IPv4-compatible, deprecated
	"100::/64", ClassReserved, // discard-only
	"64:ff9b:1::/48", ClassPrivate, // local-use NAT64
	"2001:2::/48", ClassBenchmarking,
	"2001:db8::/32", ClassDocumentation,
	"3fff::/20", ClassDocumentation,
	"5f00::/16", ClassReserved, // segment routing SIDs
	"fc00::/7", ClassPrivate, // unique local
	"fe80::/10", ClassLinkLocal,
	"fec0::/10", ClassPrivate, // site-local, deprecated
	"ff00::/8", ClassMulticast,
)

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

func mustSpecials(pairs ...string) []special {
	out := make([]special, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, special{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// Classify returns the class of a non-public address ("loopback", "private", "link-local",
// ...), or "" for a public one. An IPv6 address that carries an IPv4 address a router
// translates to (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96, 6to4 2002::/16) is classified
// by that IPv4 address, so ::ffff:127.0.0.1 is loopback; the zone of a scoped address is
// ignored. The invalid zero Addr is unspecified.
func Classify(a netip.Addr) string {
	if !a.IsValid() {
		return ClassUnspecified
	}
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			a = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(a):
			a = netip.AddrFrom4([4]byte(b[2:6]))
		}
	}
	list := specials6
	if a.Is4() {
		list = specials4
	}
	for _, s := range list {
		if s.prefix.Contains(a) {
			return s.class
		}
	}
	return ""
}
