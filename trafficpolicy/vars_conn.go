package trafficpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
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
		"conn.tls.sni": func(s *sources) any {
			if s.tls == nil {
				return s.sni
			}
			return s.tls.ServerName
		},
		"conn.tls.version": func(s *sources) any {
			return tlsField(s, func(t *tls.ConnectionState) string { return tls.VersionName(t.Version) })
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
	})
	declare(inConn, cel.BoolType, map[string]func(*sources) any{
		"conn.tls.session_resumed": func(s *sources) any { return s.tls != nil && s.tls.DidResume },
	})
	certVars("conn.tls.client.", clientCert)
	certVars("conn.tls.server.", serverCert)

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
	declare(inConn, num, map[string]func(*sources) any{
		"conn.bytes_in":  func(s *sources) any { return connBytes(s, "conn.bytes_in", true) },
		"conn.bytes_out": func(s *sources) any { return connBytes(s, "conn.bytes_out", false) },
	})
	declareUnavailable(inConn, "ngrok fills these only on endpoints with a kubernetes binding, which edgeplane does not have", map[string]*cel.Type{
		"conn.k8s.pod.id": str, "conn.k8s.pod.metadata.name": str, "conn.k8s.pod.metadata.namespace": str,
		"conn.k8s.pod.metadata.annotations": cel.MapType(str, str), "conn.k8s.pod.metadata.error_code": str, "conn.k8s.pod.metadata.error_message": str,
	})
	declare(inConn, str, map[string]func(*sources) any{"conn.tls.ja4_fingerprint": connJA4})
}

// notFingerprinted is why a connection has no JA4 fingerprint.
const notFingerprinted = "this connection's ClientHello was not fingerprinted: edgeplane fingerprints those of TLS edges' and endpoints' connections and of HTTPS connections to an edge or endpoint whose policy reads the fingerprint, when the ClientHello is read (an HTTPS connection made before the policy was in force is not)"

// connJA4 is the JA4 fingerprint of the connection's ClientHello, empty without TLS, or an
// error when the listener did not fingerprint it: a rule comparing it must not take a connection
// it cannot fingerprint as one without TLS.
func connJA4(s *sources) any {
	if s.conn != nil {
		if fp, ok := s.conn.JA4(); ok {
			return fp
		}
	}
	return types.NewErr("conn.tls.ja4_fingerprint: %s", notFingerprinted)
}

// notCounted is why a connection has no byte counts.
const notCounted = "this connection's bytes are not counted: edgeplane counts those of every plain HTTP connection, and of HTTPS connections to an edge or endpoint whose policy reads them from the handshake on (this one was made before such a policy was in force)"

// connBytes is the bytes read from (in) or written to the client so far on the connection (0
// in on_tcp_connect, which runs as it is established), or an error when the listener does not
// count them: a policy comparing them must not take a connection it cannot measure as an empty
// one.
func connBytes(s *sources, name string, in bool) any {
	if s.atConnect {
		return int64(0)
	}
	if s.conn != nil {
		if i, o, ok := s.conn.Bytes(); ok {
			if in {
				return i
			}
			return o
		}
	}
	return types.NewErr("%s: %s", name, notCounted)
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

// serverCert is the certificate edgeplane presented in the connection's handshake, or nil (no
// TLS, or a listener that does not say: a unit test's). It is looked up once per request.
func serverCert(s *sources) *x509.Certificate {
	if s.tls == nil || s.conn == nil {
		return nil
	}
	l := s.lazyParts()
	if !l.servedDone {
		l.served, l.servedDone = s.conn.ServedCertificate(s.tls.ServerName), true
	}
	return l.served
}
