package edgeplane

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Defaults of the deployment settings, used when the operator configures nothing.
const (
	// DefaultServiceDomains is the base domain whose subdomains edgeplane treats as its own: they
	// need no CNAME record, so their reserved domains show a null cname_target.
	DefaultServiceDomains = "edgeplane.app"
	// DefaultCNAMEZone is the DNS zone under which custom domains get their CNAME targets.
	DefaultCNAMEZone = "cname.edgeplane.app"
	// DefaultTCPHost and the default port range are where reserved TCP addresses are assigned.
	DefaultTCPHost    = "tcp.edgeplane.app"
	DefaultTCPPortMin = 10000
	DefaultTCPPortMax = 29999
)

// Settings are the few deployment choices that domain rules depend on. They come from the command
// line (--service-domains, --cname-zone), reach rules through Op.Settings, and are never stored:
// what a rule derived from them at creation (a domain's cname_target) is stored with the object,
// so changing them later does not rewrite existing objects.
type Settings struct {
	// ServiceDomains are the base domains the operator owns. A reserved domain under one of them
	// is served without a CNAME record of the user's; a custom domain needs one.
	ServiceDomains []string
	// CNAMEZone is the DNS zone in which edgeplane generates the CNAME targets that users point
	// their custom domains at. Names inside it cannot be reserved.
	CNAMEZone string
	// TCPHost and TCPPortMin..TCPPortMax are where reserved TCP addresses are assigned
	// (--tcp-addr-host, --tcp-port-range).
	TCPHost                string
	TCPPortMin, TCPPortMax int
	// BaseURL is the public address of the API (--base-url, or http://<listen address>), without
	// a trailing slash. Rules that generate URLs users configure elsewhere use it, such as the
	// SAML module's entity id and assertion consumer service URL under <BaseURL>/saml/<route id>/.
	// Unlike a uri, such a URL is stored with the object when it is generated: an identity
	// provider is configured with it, so it must not change behind the user's back. Empty (a
	// store never configured) yields URLs of the path alone.
	BaseURL string
}

// DefaultSettings returns the settings of a server configured with nothing.
func DefaultSettings() Settings {
	return Settings{ServiceDomains: []string{DefaultServiceDomains}, CNAMEZone: DefaultCNAMEZone,
		TCPHost: DefaultTCPHost, TCPPortMin: DefaultTCPPortMin, TCPPortMax: DefaultTCPPortMax}
}

// ParseSettings builds Settings from the comma-separated list of service domains and the CNAME
// zone as given on the command line. Empty values take the defaults; names are lowercased and
// must be hostnames of at least two labels, so a typo fails at startup rather than misclassifying
// every domain later.
func ParseSettings(serviceDomains, cnameZone string) (Settings, error) {
	s := DefaultSettings()
	if strings.TrimSpace(serviceDomains) != "" {
		s.ServiceDomains = nil
		for d := range strings.SplitSeq(serviceDomains, ",") {
			d = strings.ToLower(strings.TrimSpace(d))
			if d == "" {
				continue
			}
			if !ValidHostname(d, false) {
				return Settings{}, fmt.Errorf("--service-domains: %q is not a hostname of at least two labels", d)
			}
			if !slices.Contains(s.ServiceDomains, d) {
				s.ServiceDomains = append(s.ServiceDomains, d)
			}
		}
		if len(s.ServiceDomains) == 0 {
			return Settings{}, fmt.Errorf("--service-domains: %q names no domain", serviceDomains)
		}
	}
	if z := strings.ToLower(strings.TrimSpace(cnameZone)); z != "" {
		if !ValidHostname(z, false) {
			return Settings{}, fmt.Errorf("--cname-zone: %q is not a hostname of at least two labels", z)
		}
		s.CNAMEZone = z
	}
	return s, nil
}

// ParseTCPAddrs sets where reserved TCP addresses are assigned from --tcp-addr-host and
// --tcp-port-range ("10000-29999"); empty values keep the defaults.
func (s *Settings) ParseTCPAddrs(host, portRange string) error {
	if h := strings.ToLower(strings.TrimSpace(host)); h != "" {
		if !ValidHostname(h, false) {
			return fmt.Errorf("--tcp-addr-host: %q is not a hostname of at least two labels", h)
		}
		s.TCPHost = h
	}
	if r := strings.TrimSpace(portRange); r != "" {
		lo, hi, ok := strings.Cut(r, "-")
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		b, errB := strconv.Atoi(strings.TrimSpace(hi))
		if !ok || errA != nil || errB != nil || a < 1 || b > 65535 || a > b {
			return fmt.Errorf("--tcp-port-range: %q is not LOW-HIGH with 1 <= LOW <= HIGH <= 65535", r)
		}
		s.TCPPortMin, s.TCPPortMax = a, b
	}
	return nil
}

// effective returns s with defaults in place of empty values, so a zero Settings (a store that
// was never configured) behaves like the defaults.
func (s Settings) effective() Settings {
	d := DefaultSettings()
	if len(s.ServiceDomains) == 0 {
		s.ServiceDomains = d.ServiceDomains
	}
	if s.CNAMEZone == "" {
		s.CNAMEZone = d.CNAMEZone
	}
	if s.TCPHost == "" {
		s.TCPHost = d.TCPHost
	}
	if s.TCPPortMin == 0 || s.TCPPortMax == 0 {
		s.TCPPortMin, s.TCPPortMax = d.TCPPortMin, d.TCPPortMax
	}
	return s
}

// serviceDomainOf returns the service domain that host is a subdomain of, or "".
func (s Settings) serviceDomainOf(host string) string {
	for _, d := range s.ServiceDomains {
		if strings.HasSuffix(host, "."+d) {
			return d
		}
	}
	return ""
}

// within reports whether host is zone or a name inside it.
func within(host, zone string) bool {
	return host == zone || strings.HasSuffix(host, "."+zone)
}
