package edgeplane

import (
	"slices"
	"strings"
	"testing"
)

// hostports are edge bodies of each kind with the hostports.
func tlsHostports(hp ...string) *TLSEdgeBody {
	return &TLSEdgeBody{edgeBody: edgeBody{Hostports: hp}}
}
func httpsHostports(hp ...string) *HTTPSEdgeBody {
	return &HTTPSEdgeBody{edgeBody: edgeBody{Hostports: hp}}
}
func tcpHostports(hp ...string) *TCPEdgeBody {
	return &TCPEdgeBody{edgeBody: edgeBody{Hostports: hp}}
}

// TestValidateEdgeHostports: each hostport is a hostname, a colon and a port from 1 to 65535
// written in plain digits (else 400 ERR_NGROK_7104 naming hostports[i]), and no hostport is
// listed twice, in any case or spacing (ERR_NGROK_7133). Which hosts and ports an edge may use
// (reserved domains on 443, reserved addresses) needs the store and is not checked here.
func TestValidateEdgeHostports(t *testing.T) {
	const first = "hostports[0]"
	runCases(t, []vcase{
		pass("no hostports", fromJSON[TLSEdgeBody](`{}`)),
		pass("null hostports", fromJSON[HTTPSEdgeBody](`{"hostports": null}`)),
		pass("empty hostports", fromJSON[TCPEdgeBody](`{"hostports": []}`)),
		pass("TLS hostport", fromJSON[TLSEdgeBody](`{"hostports": ["app.example.com:443"]}`)),
		pass("HTTPS hostports", fromJSON[HTTPSEdgeBody](`{"hostports": ["app.example.com:443", "api.example.com:443"], "description": "web"}`)),
		pass("TCP hostport", fromJSON[TCPEdgeBody](`{"hostports": ["1.tcp.example.com:20000"]}`)),
		pass("capitals and spaces", tlsHostports(" App.Example.COM:443 ")),
		pass("port 1", tcpHostports("1.tcp.example.com:1")),
		pass("port 65535", tcpHostports("1.tcp.example.com:65535")),
		pass("any port, for the store to judge", httpsHostports("app.example.com:8443")),
		failMsg("no port", tlsHostports("app.example.com"), first, CodeBadHostport, "host:port"),
		fail("empty port", tlsHostports("app.example.com:"), first, CodeBadHostport),
		fail("no host", tlsHostports(":443"), first, CodeBadHostport),
		fail("empty", tlsHostports(""), first, CodeBadHostport),
		fail("port 0", tcpHostports("1.tcp.example.com:0"), first, CodeBadHostport),
		fail("port 65536", tcpHostports("1.tcp.example.com:65536"), first, CodeBadHostport),
		fail("port with a leading zero", tlsHostports("app.example.com:0443"), first, CodeBadHostport),
		fail("port with a plus sign", tlsHostports("app.example.com:+443"), first, CodeBadHostport),
		fail("negative port", tcpHostports("1.tcp.example.com:-1"), first, CodeBadHostport),
		fail("port by name", tlsHostports("app.example.com:https"), first, CodeBadHostport),
		fail("two ports", tlsHostports("app.example.com:443:443"), first, CodeBadHostport),
		fail("single-label host", tcpHostports("localhost:20000"), first, CodeBadHostport),
		fail("IPv6 host", tcpHostports("[2001:db8::1]:20000"), first, CodeBadHostport),
		fail("URL", httpsHostports("https://app.example.com:443"), first, CodeBadHostport),
		fail("host with a path", httpsHostports("app.example.com/x:443"), first, CodeBadHostport),
		fail("underscore", httpsHostports("my_app.example.com:443"), first, CodeBadHostport),
		fail("space inside", httpsHostports("app .example.com:443"), first, CodeBadHostport),
		fail("bad one named", tlsHostports("a.example.com:443", "b.example.com:443", "c.example.com"), "hostports[2]", CodeBadHostport),
		failMsg("duplicate", tlsHostports("a.example.com:443", "a.example.com:443"), "hostports[1]", CodeHostportDuplicated, "listed twice"),
		fail("duplicate in other case", httpsHostports("a.example.com:443", "b.example.com:443", "A.Example.com:443"), "hostports[2]", CodeHostportDuplicated),
		fail("duplicate with spaces", tcpHostports("1.tcp.example.com:20000", " 1.tcp.example.com:20000"), "hostports[1]", CodeHostportDuplicated),
		pass("same host, other port", tcpHostports("1.tcp.example.com:20000", "1.tcp.example.com:20001")),
		fail("annotations first", &TLSEdgeBody{edgeBody: edgeBody{AnnotationFields: AnnotationFields{Description: ptr("a\nb")}, Hostports: []string{"x"}}}, "description", CodeInvalid),
		fail("hostports before modules", fromJSON[TCPEdgeBody](`{"hostports": ["x"], "backend": {}}`), first, CodeBadHostport),
	})
}

// TestValidateEdgeHostportsCanonical: Validate stores hostports trimmed and lowercased.
func TestValidateEdgeHostportsCanonical(t *testing.T) {
	b := tlsHostports(" App.Example.COM:443", "API.example.com:443 ")
	if err := b.Validate(); err != nil || !slices.Equal(b.Hostports, []string{"app.example.com:443", "api.example.com:443"}) {
		t.Errorf("hostports %q, %v", b.Hostports, err)
	}
}

// TestValidateEdgeModules: an edge body checks every module it carries with the module's rules
// (validate_modules_test.go), and names the field inside the module: "backend.backend_id".
func TestValidateEdgeModules(t *testing.T) {
	runCases(t, []vcase{
		pass("TLS edge with every module", fromJSON[TLSEdgeBody](`{"hostports": ["a.example.com:443"],
			"backend": {"backend_id": "bkdsa_x"}, "ip_restriction": {"ip_policy_ids": ["ipp_x"]},
			"mutual_tls": {"certificate_authority_ids": ["ca_x"]}, "tls_termination": {"terminate_at": "edge", "min_version": "1.3"},
			"traffic_policy": {"value": "on_tcp_connect: []"}}`)),
		pass("HTTPS edge with every module", fromJSON[HTTPSEdgeBody](`{"mutual_tls": {"enabled": false, "certificate_authority_ids": ["ca_x"]}, "tls_termination": {"min_version": "1.0"}}`)),
		pass("TCP edge with every module", fromJSON[TCPEdgeBody](`{"backend": {"enabled": true, "backend_id": "bkdtg_x"}, "ip_restriction": {"ip_policy_ids": ["ipp_x"]},
			"traffic_policy": {"value": "{\"on_tcp_connect\": [{\"actions\": [{\"type\": \"deny\"}]}]}"}}`)),
		fail("TLS backend without id", fromJSON[TLSEdgeBody](`{"backend": {}}`), "backend.backend_id", CodeBackendMissing),
		fail("TLS ip_restriction without policies", fromJSON[TLSEdgeBody](`{"ip_restriction": {"ip_policy_ids": []}}`), "ip_restriction.ip_policy_ids", CodeIPPolicyMissing),
		fail("TLS mutual_tls without authorities", fromJSON[TLSEdgeBody](`{"mutual_tls": {}}`), "mutual_tls.certificate_authority_ids", CodeCAMissing),
		fail("TLS termination elsewhere", fromJSON[TLSEdgeBody](`{"tls_termination": {"terminate_at": "agent"}}`), "tls_termination.terminate_at", CodeBadTerminateAt),
		fail("TLS traffic policy without value", fromJSON[TLSEdgeBody](`{"traffic_policy": {"enabled": true}}`), "traffic_policy.value", CodeInvalid),
		fail("HTTPS mutual_tls without authorities", fromJSON[HTTPSEdgeBody](`{"mutual_tls": {"certificate_authority_ids": null}}`), "mutual_tls.certificate_authority_ids", CodeCAMissing),
		fail("HTTPS termination version", fromJSON[HTTPSEdgeBody](`{"tls_termination": {"min_version": "1.4"}}`), "tls_termination.min_version", CodeUnsupportedTLSVersion),
		fail("TCP backend with empty id", fromJSON[TCPEdgeBody](`{"backend": {"backend_id": ""}}`), "backend.backend_id", CodeBackendMissing),
		fail("TCP ip_restriction without policies", fromJSON[TCPEdgeBody](`{"ip_restriction": {}}`), "ip_restriction.ip_policy_ids", CodeIPPolicyMissing),
		failMsg("TCP traffic policy with an HTTP-only action", fromJSON[TCPEdgeBody](`{"traffic_policy": {"value": "on_tcp_connect: [{actions: [{type: url-rewrite}]}]"}}`),
			"traffic_policy.value", CodeInvalid, "on_tcp_connect[0].actions[0].type"),
		fail("modules in field order", fromJSON[TLSEdgeBody](`{"traffic_policy": {}, "backend": {}}`), "backend.backend_id", CodeBackendMissing),
	})
}

// route is a route body with match_type and match.
func route(matchType, match string) *HTTPSEdgeRouteBody {
	return &HTTPSEdgeRouteBody{MatchType: &matchType, Match: &match}
}

// TestValidateRoutes: match_type is exact_path or path_prefix (400 ERR_NGROK_7130); match is a
// path, a host (a wildcard one too) or a host and a path, at most 2048 bytes without spaces or
// control characters; every module given is checked and named inside the route body. That create
// requires both match fields is Create's rule.
func TestValidateRoutes(t *testing.T) {
	runCases(t, []vcase{
		pass("update of nothing", fromJSON[HTTPSEdgeRouteBody](`{}`)),
		pass("path prefix", fromJSON[HTTPSEdgeRouteBody](`{"match_type": "path_prefix", "match": "/"}`)),
		pass("exact path", route(MatchExactPath, "/api/v1/users")),
		pass("path with escapes", route(MatchPathPrefix, "/a%20b/~c")),
		pass("host", route(MatchPathPrefix, "app.example.com")),
		pass("host and path", route(MatchPathPrefix, "app.example.com/api")),
		pass("wildcard host and path", route(MatchPathPrefix, "*.example.com/api")),
		pass("match of 2048 bytes", route(MatchPathPrefix, "/"+strings.Repeat("a", 2047))),
		pass("match_type alone", fromJSON[HTTPSEdgeRouteBody](`{"match_type": "exact_path"}`)),
		pass("match alone", fromJSON[HTTPSEdgeRouteBody](`{"match": "/x"}`)),
		failMsg("empty match_type", route("", "/"), "match_type", CodeBadMatchType, `"exact_path" or "path_prefix"`),
		fail("other match_type", route("regex", "/"), "match_type", CodeBadMatchType),
		fail("match_type in capitals", route("PATH_PREFIX", "/"), "match_type", CodeBadMatchType),
		failMsg("empty match", route(MatchPathPrefix, ""), "match", CodeInvalid, "must not be empty"),
		failMsg("match of 2049 bytes", route(MatchPathPrefix, "/"+strings.Repeat("a", 2048)), "match", CodeInvalid, "2048"),
		failMsg("space in match", route(MatchPathPrefix, "/a b"), "match", CodeInvalid, "spaces or control characters"),
		fail("tab in match", route(MatchPathPrefix, "/a\tb"), "match", CodeInvalid),
		fail("line feed in match", fromJSON[HTTPSEdgeRouteBody](`{"match": "/a\nb"}`), "match", CodeInvalid),
		fail("DEL in match", route(MatchPathPrefix, "/a\x7f"), "match", CodeInvalid),
		failMsg("relative path", route(MatchPathPrefix, "api/v1"), "match", CodeInvalid, "neither a path"),
		fail("host with a port", route(MatchPathPrefix, "app.example.com:8443/api"), "match", CodeInvalid),
		fail("URL", route(MatchPathPrefix, "https://app.example.com/"), "match", CodeInvalid),
		fail("inner wildcard host", route(MatchPathPrefix, "app.*.example.com"), "match", CodeInvalid),
		fail("match_type before match", route("x", ""), "match_type", CodeBadMatchType),
		fail("annotations first", &HTTPSEdgeRouteBody{AnnotationFields: AnnotationFields{Description: ptr("a\rb")}, MatchType: ptr("x")}, "description", CodeInvalid),
		fail("match before modules", fromJSON[HTTPSEdgeRouteBody](`{"match": "", "backend": {}}`), "match", CodeInvalid),
		pass("route with every module", fromJSON[HTTPSEdgeRouteBody](`{"match_type": "path_prefix", "match": "/",
			"backend": {"backend_id": "bkdhr_x"}, "ip_restriction": {"ip_policy_ids": ["ipp_x"]},
			"circuit_breaker": {"error_threshold_percentage": 0.25}, "compression": {}, "websocket_tcp_converter": {"enabled": false},
			"request_headers": {"add": {"X-A": "1"}}, "response_headers": {"remove": ["Server"]},
			"webhook_verification": {"provider": "sns"}, "traffic_policy": {"value": "on_http_request: []"},
			"oidc": {"issuer": "https://id.example.com", "client_id": "c", "client_secret": "s"},
			"user_agent_filter": {"deny": ["(?i)bot"]}, "jwt_validation": {"jws": {"allowed_algorithms": ["RS256"]}}}`)),
		fail("route backend", fromJSON[HTTPSEdgeRouteBody](`{"backend": {"backend_id": null}}`), "backend.backend_id", CodeBackendMissing),
		fail("route ip_restriction", fromJSON[HTTPSEdgeRouteBody](`{"ip_restriction": {}}`), "ip_restriction.ip_policy_ids", CodeIPPolicyMissing),
		fail("route circuit_breaker", fromJSON[HTTPSEdgeRouteBody](`{"circuit_breaker": {"error_threshold_percentage": 50}}`), "circuit_breaker.error_threshold_percentage", CodeBadErrorThreshold),
		fail("route request_headers", fromJSON[HTTPSEdgeRouteBody](`{"request_headers": {"add": {"Host": "x"}}}`), "request_headers.add", CodeInvalid),
		fail("route response_headers", fromJSON[HTTPSEdgeRouteBody](`{"response_headers": {"remove": ["Connection"]}}`), "response_headers.remove", CodeInvalid),
		fail("route webhook_verification", fromJSON[HTTPSEdgeRouteBody](`{"webhook_verification": {"provider": "myhooks"}}`), "webhook_verification.provider", CodeProviderUnsupported),
		fail("route traffic_policy", fromJSON[HTTPSEdgeRouteBody](`{"traffic_policy": {"value": "on_connect: []"}}`), "traffic_policy.value", CodeInvalid),
		fail("route oauth", fromJSON[HTTPSEdgeRouteBody](`{"oauth": {}}`), "oauth.provider", CodeInvalid),
		fail("route saml", fromJSON[HTTPSEdgeRouteBody](`{"saml": {"idp_metadata": ""}}`), "saml.idp_metadata", CodeInvalid),
		fail("route oidc", fromJSON[HTTPSEdgeRouteBody](`{"oidc": {"issuer": "id.example.com"}}`), "oidc.issuer", CodeInvalid),
		fail("route user_agent_filter", fromJSON[HTTPSEdgeRouteBody](`{"user_agent_filter": {"allow": ["("]}}`), "user_agent_filter.allow[0]", CodeInvalid),
		fail("route jwt_validation", fromJSON[HTTPSEdgeRouteBody](`{"jwt_validation": {"jws": {"allowed_algorithms": ["none"]}}}`), "jwt_validation.jws.allowed_algorithms[0]", CodeInvalid),
	})
}
