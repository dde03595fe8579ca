package trafficpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
)

// The conn.*, endpoint.* and time.* variables, as ngrok documents them.
func init() {
	str, num := cel.StringType, cel.IntType
	declare(inConn, str, map[string]func(*sources) any{
		"conn.client_ip": func(s *sources) any { ip, _ := splitAddr(s.client); return ip },
		"conn.server_ip": func(s *sources) any { ip, _ := splitAddr(s.server); return ip },
		"endpoint.addr": func(s *sources) any {
			if e := s.endpoint; e != nil && e.Host != "" {
				return net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
			}
			return ""
		},
		"endpoint.host":     func(s *sources) any { return endpointField(s, func(e *Endpoint) string { return e.Host }) },
		"endpoint.id":       func(s *sources) any { return endpointField(s, func(e *Endpoint) string { return e.ID }) },
		"endpoint.protocol": func(s *sources) any { return endpointField(s, func(e *Endpoint) string { return e.Protocol }) },
		"endpoint.url":      func(s *sources) any { return endpointField(s, func(e *Endpoint) string { return e.URL }) },
		"time.now":          func(*sources) any { return time.Now().UTC().Format(time.RFC3339) },
		"conn.tls.cipher_suite": func(s *sources) any {
			if s.tls == nil {
				return ""
			}
			return tls.CipherSuiteName(s.tls.CipherSuite)
		},
		"conn.tls.negotiated_alpn": func(s *sources) any {
			return tlsField(s, func(t *tls.ConnectionState) string { return t.NegotiatedProtocol })
		},
		"conn.tls.sni": func(s *sources) any { return tlsField(s, func(t *tls.ConnectionState) string { return t.ServerName }) },
		"conn.tls.version": func(s *sources) any {
			return tlsField(s, func(t *tls.ConnectionState) string { return tls.VersionName(t.Version) })
		},
		"conn.tls.client.issuer": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string { return c.Issuer.String() })
		},
		"conn.tls.client.subject": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string { return c.Subject.String() })
		},
		"conn.tls.client.issuer.common_name": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string { return c.Issuer.CommonName })
		},
		"conn.tls.client.subject.common_name": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string { return c.Subject.CommonName })
		},
		"conn.tls.client.pem": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string {
				return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
			})
		},
		"conn.tls.client.san": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string {
				var all []string
				all = append(all, c.DNSNames...)
				all = append(all, c.EmailAddresses...)
				for _, ip := range c.IPAddresses {
					all = append(all, ip.String())
				}
				for _, u := range c.URIs {
					all = append(all, u.String())
				}
				return strings.Join(all, ",")
			})
		},
		"conn.tls.client.serial_number": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) })
		},
		"conn.tls.client.signature_algorithm": func(s *sources) any {
			return certField(s, func(c *x509.Certificate) string { return c.SignatureAlgorithm.String() })
		},
	})
	declare(inConn, num, map[string]func(*sources) any{
		"conn.client_port": func(s *sources) any { _, p := splitAddr(s.client); return p },
		"conn.server_port": func(s *sources) any { _, p := splitAddr(s.server); return p },
		"endpoint.port": func(s *sources) any {
			if s.endpoint == nil {
				return int64(0)
			}
			return int64(s.endpoint.Port)
		},
	})
	declare(inConn, cel.TimestampType, map[string]func(*sources) any{
		"conn.ts.start": func(s *sources) any {
			if s.connStart.IsZero() {
				return time.Now()
			}
			return s.connStart
		},
		"conn.tls.client.validity.not_after": func(s *sources) any {
			if c := clientCert(s); c != nil {
				return c.NotAfter
			}
			return time.Time{}
		},
		"conn.tls.client.validity.not_before": func(s *sources) any {
			if c := clientCert(s); c != nil {
				return c.NotBefore
			}
			return time.Time{}
		},
	})
	declare(inConn, cel.BoolType, map[string]func(*sources) any{
		"conn.tls.session_resumed": func(s *sources) any { return s.tls != nil && s.tls.DidResume },
	})
	names := map[string]func(pkix.Name) []string{
		"country": func(n pkix.Name) []string { return n.Country }, "locality": func(n pkix.Name) []string { return n.Locality },
		"organization": func(n pkix.Name) []string { return n.Organization }, "organizational_unit": func(n pkix.Name) []string { return n.OrganizationalUnit },
		"postal_code": func(n pkix.Name) []string { return n.PostalCode }, "province": func(n pkix.Name) []string { return n.Province },
		"street_address": func(n pkix.Name) []string { return n.StreetAddress },
	}
	lists := map[string]func(*sources) any{
		"conn.tls.client.san.dns_names": func(s *sources) any { return certList(s, func(c *x509.Certificate) []string { return c.DNSNames }) },
		"conn.tls.client.san.email_addresses": func(s *sources) any {
			return certList(s, func(c *x509.Certificate) []string { return c.EmailAddresses })
		},
		"conn.tls.client.san.ip_addresses": func(s *sources) any {
			return certList(s, func(c *x509.Certificate) []string {
				var out []string
				for _, ip := range c.IPAddresses {
					out = append(out, ip.String())
				}
				return out
			})
		},
		"conn.tls.client.san.uris": func(s *sources) any {
			return certList(s, func(c *x509.Certificate) []string {
				var out []string
				for _, u := range c.URIs {
					out = append(out, u.String())
				}
				return out
			})
		},
	}
	for field, get := range names {
		lists["conn.tls.client.issuer."+field] = func(s *sources) any {
			return certList(s, func(c *x509.Certificate) []string { return get(c.Issuer) })
		}
		lists["conn.tls.client.subject."+field] = func(s *sources) any {
			return certList(s, func(c *x509.Certificate) []string { return get(c.Subject) })
		}
	}
	declare(inConn, cel.ListType(cel.StringType), lists)
	declare(inConn, cel.ListType(cel.MapType(cel.StringType, cel.DynType)), map[string]func(*sources) any{
		"conn.tls.client.extensions": func(s *sources) any {
			c := clientCert(s)
			out := []map[string]any{}
			if c == nil {
				return out
			}
			for _, e := range c.Extensions {
				out = append(out, map[string]any{"id": e.Id.String(), "critical": e.Critical, "value": e.Value})
			}
			return out
		},
	})

	// What needs a database or a concept edgeplane does not have.
	declareUnavailable(inConn, "edgeplane has no geolocation database, so it cannot tell where an address is", map[string]*cel.Type{
		"conn.geo.city": str, "conn.geo.country": str, "conn.geo.country_code": str, "conn.geo.latitude": str,
		"conn.geo.longitude": str, "conn.geo.radius": str, "conn.geo.subdivision": str,
	})
	intel := map[string]*cel.Type{}
	for _, side := range []string{"conn.client_ip.", "conn.server_ip."} {
		intel[side+"categories"] = cel.ListType(cel.DynType)
		intel[side+"is_on_blocklist"] = cel.BoolType
		intel[side+"is_tor_node"] = cel.BoolType
		intel[side+"as.number"] = num
		intel[side+"as.organization"] = str
		for _, loc := range []string{"geo.location.", "geo.registered_location."} {
			for _, f := range []string{"city", "continent", "country", "country_code", "metro_code", "postal_code", "subdivision", "timezone", "latitude", "longitude", "radius"} {
				intel[side+loc+f] = str
			}
			intel[side+loc+"is_eu"] = cel.BoolType
		}
	}
	declareUnavailable(inConn, "edgeplane has no IP intelligence database (categories, block lists, Tor nodes, autonomous systems, locations)", intel)
	declareUnavailable(inConn, "edgeplane has no points of presence: every connection is served by the server it reached", map[string]*cel.Type{"conn.server_region": str})
	declareUnavailable(inConn, "edgeplane does not count a connection's bytes (counting them would cost every connection, with a policy or not)", map[string]*cel.Type{"conn.bytes_in": num, "conn.bytes_out": num})
	declareUnavailable(inConn, "ngrok fills these only on endpoints with a kubernetes binding, which edgeplane does not have", map[string]*cel.Type{
		"conn.k8s.pod.id": str, "conn.k8s.pod.metadata.name": str, "conn.k8s.pod.metadata.namespace": str,
		"conn.k8s.pod.metadata.annotations": cel.MapType(str, str), "conn.k8s.pod.metadata.error_code": str, "conn.k8s.pod.metadata.error_message": str,
	})
	declareUnavailable(inConn, "edgeplane does not compute JA4 fingerprints of TLS handshakes", map[string]*cel.Type{"conn.tls.ja4_fingerprint": str})
	server := map[string]*cel.Type{"conn.tls.server.issuer": str, "conn.tls.server.subject": str, "conn.tls.server.san": str,
		"conn.tls.server.serial_number": str, "conn.tls.server.signature_algorithm": str, "conn.tls.server.issuer.common_name": str,
		"conn.tls.server.subject.common_name": str, "conn.tls.server.validity.not_after": cel.TimestampType,
		"conn.tls.server.validity.not_before": cel.TimestampType, "conn.tls.server.extensions": cel.ListType(cel.DynType),
		"conn.tls.server.san.dns_names": cel.ListType(str), "conn.tls.server.san.email_addresses": cel.ListType(str),
		"conn.tls.server.san.ip_addresses": cel.ListType(str), "conn.tls.server.san.uris": cel.ListType(str)}
	for field := range names {
		server["conn.tls.server.issuer."+field] = cel.ListType(str)
		server["conn.tls.server.subject."+field] = cel.ListType(str)
	}
	declareUnavailable(inConn, "edgeplane does not give the certificate it served to the policy", server)
}

// splitAddr splits host:port, the host without an IPv4-mapped IPv6 prefix.
func splitAddr(hostport string) (string, int64) {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return ap.Addr().Unmap().String(), int64(ap.Port())
	}
	host, port, _ := net.SplitHostPort(hostport)
	p, _ := strconv.Atoi(port)
	return host, int64(p)
}

func endpointField(s *sources, f func(*Endpoint) string) string {
	if s.endpoint == nil {
		return ""
	}
	return f(s.endpoint)
}

func tlsField(s *sources, f func(*tls.ConnectionState) string) string {
	if s.tls == nil {
		return ""
	}
	return f(s.tls)
}

// clientCert is the client's certificate under mutual TLS, or nil.
func clientCert(s *sources) *x509.Certificate {
	if s.tls == nil || len(s.tls.PeerCertificates) == 0 {
		return nil
	}
	return s.tls.PeerCertificates[0]
}

func certField(s *sources, f func(*x509.Certificate) string) string {
	if c := clientCert(s); c != nil {
		return f(c)
	}
	return ""
}

func certList(s *sources, f func(*x509.Certificate) []string) []string {
	if c := clientCert(s); c != nil {
		if l := f(c); l != nil {
			return l
		}
	}
	return []string{}
}
