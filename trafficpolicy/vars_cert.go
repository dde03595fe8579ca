package trafficpolicy

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
)

// certVars declares the variables of a certificate under prefix (conn.tls.client. or
// conn.tls.server.), as ngrok documents them for both: subject and issuer with their parts,
// the subject alternative names, serial number in hex, signature algorithm, validity,
// extensions and PEM. Without a certificate (cert returns nil) they are empty.
func certVars(prefix string, cert func(*sources) *x509.Certificate) {
	field := func(f func(*x509.Certificate) string) func(*sources) any {
		return func(s *sources) any {
			if c := cert(s); c != nil {
				return f(c)
			}
			return ""
		}
	}
	list := func(f func(*x509.Certificate) []string) func(*sources) any {
		return func(s *sources) any {
			if c := cert(s); c != nil {
				if l := f(c); l != nil {
					return l
				}
			}
			return []string{}
		}
	}
	declare(inConn, cel.StringType, map[string]func(*sources) any{
		prefix + "issuer":              field(func(c *x509.Certificate) string { return c.Issuer.String() }),
		prefix + "subject":             field(func(c *x509.Certificate) string { return c.Subject.String() }),
		prefix + "issuer.common_name":  field(func(c *x509.Certificate) string { return c.Issuer.CommonName }),
		prefix + "subject.common_name": field(func(c *x509.Certificate) string { return c.Subject.CommonName }),
		prefix + "pem": field(func(c *x509.Certificate) string {
			return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
		}),
		prefix + "san":                 field(func(c *x509.Certificate) string { return strings.Join(sans(c), ",") }),
		prefix + "serial_number":       field(func(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) }),
		prefix + "signature_algorithm": field(func(c *x509.Certificate) string { return c.SignatureAlgorithm.String() }),
	})
	declare(inConn, cel.TimestampType, map[string]func(*sources) any{
		prefix + "validity.not_after": func(s *sources) any {
			if c := cert(s); c != nil {
				return c.NotAfter
			}
			return time.Time{}
		},
		prefix + "validity.not_before": func(s *sources) any {
			if c := cert(s); c != nil {
				return c.NotBefore
			}
			return time.Time{}
		},
	})
	names := map[string]func(pkix.Name) []string{
		"country": func(n pkix.Name) []string { return n.Country }, "locality": func(n pkix.Name) []string { return n.Locality },
		"organization": func(n pkix.Name) []string { return n.Organization }, "organizational_unit": func(n pkix.Name) []string { return n.OrganizationalUnit },
		"postal_code": func(n pkix.Name) []string { return n.PostalCode }, "province": func(n pkix.Name) []string { return n.Province },
		"street_address": func(n pkix.Name) []string { return n.StreetAddress },
	}
	lists := map[string]func(*sources) any{
		prefix + "san.dns_names":       list(func(c *x509.Certificate) []string { return c.DNSNames }),
		prefix + "san.email_addresses": list(func(c *x509.Certificate) []string { return c.EmailAddresses }),
		prefix + "san.ip_addresses": list(func(c *x509.Certificate) []string {
			var out []string
			for _, ip := range c.IPAddresses {
				out = append(out, ip.String())
			}
			return out
		}),
		prefix + "san.uris": list(func(c *x509.Certificate) []string {
			var out []string
			for _, u := range c.URIs {
				out = append(out, u.String())
			}
			return out
		}),
	}
	for name, get := range names {
		lists[prefix+"issuer."+name] = list(func(c *x509.Certificate) []string { return get(c.Issuer) })
		lists[prefix+"subject."+name] = list(func(c *x509.Certificate) []string { return get(c.Subject) })
	}
	declare(inConn, cel.ListType(cel.StringType), lists)
	declare(inConn, cel.ListType(cel.MapType(cel.StringType, cel.DynType)), map[string]func(*sources) any{
		prefix + "extensions": func(s *sources) any {
			out := []map[string]any{}
			if c := cert(s); c != nil {
				for _, e := range c.Extensions {
					out = append(out, map[string]any{"id": e.Id.String(), "critical": e.Critical, "value": e.Value})
				}
			}
			return out
		},
	})
}

// sans are a certificate's subject alternative names: DNS names, email addresses, IP addresses
// and URIs, in that order.
func sans(c *x509.Certificate) []string {
	var all []string
	all = append(all, c.DNSNames...)
	all = append(all, c.EmailAddresses...)
	for _, ip := range c.IPAddresses {
		all = append(all, ip.String())
	}
	for _, u := range c.URIs {
		all = append(all, u.String())
	}
	return all
}
