package edgeplane

import (
	"strings"
	"testing"
)

// The module requests edges and routes share, checked on their own as a module PUT sends them
// (fields unprefixed; inside an edge or route body they are prefixed with the module's name, see
// validate_edges_test.go). The sign-in and filter modules of routes are in
// validate_route_auth_test.go.

// TestValidateReferenceModules: backend needs a backend id (400 ERR_NGROK_6501), ip_restriction
// at least one IP policy (ERR_NGROK_7007), mutual_tls at least one certificate authority
// (ERR_NGROK_7072). Whether the ids exist is Build's rule.
func TestValidateReferenceModules(t *testing.T) {
	runCases(t, []vcase{
		pass("backend", fromJSON[EndpointBackendMutate](`{"backend_id": "bkdsa_x"}`)),
		pass("backend disabled", fromJSON[EndpointBackendMutate](`{"enabled": false, "backend_id": "bkdwd_x"}`)),
		failMsg("backend without id", fromJSON[EndpointBackendMutate](`{"enabled": true}`), "backend_id", CodeBackendMissing, "is required"),
		fail("backend with null id", fromJSON[EndpointBackendMutate](`{"backend_id": null}`), "backend_id", CodeBackendMissing),
		fail("backend with empty id", fromJSON[EndpointBackendMutate](`{"backend_id": ""}`), "backend_id", CodeBackendMissing),
		pass("ip_restriction", fromJSON[EndpointIPPolicyMutate](`{"ip_policy_ids": ["ipp_a", "ipp_b"]}`)),
		pass("ip_restriction of 32 policies", &EndpointIPPolicyMutate{IPPolicyIDs: strs(MaxModuleListEntries, func(i int) string { return "ipp_" + strings.Repeat("x", i+1) })}),
		failMsg("ip_restriction without policies", fromJSON[EndpointIPPolicyMutate](`{"enabled": true}`), "ip_policy_ids", CodeIPPolicyMissing, "at least one"),
		fail("ip_restriction with no policy", fromJSON[EndpointIPPolicyMutate](`{"ip_policy_ids": []}`), "ip_policy_ids", CodeIPPolicyMissing),
		fail("ip_restriction of 33 policies", &EndpointIPPolicyMutate{IPPolicyIDs: strs(MaxModuleListEntries+1, func(i int) string { return "ipp_" + strings.Repeat("x", i+1) })}, "ip_policy_ids", CodeInvalid),
		pass("mutual_tls", fromJSON[EndpointMutualTLSMutate](`{"certificate_authority_ids": ["ca_x"]}`)),
		failMsg("mutual_tls without authorities", fromJSON[EndpointMutualTLSMutate](`{}`), "certificate_authority_ids", CodeCAMissing, "at least one"),
		fail("mutual_tls with no authority", fromJSON[EndpointMutualTLSMutate](`{"certificate_authority_ids": []}`), "certificate_authority_ids", CodeCAMissing),
		fail("mutual_tls of 33 authorities", &EndpointMutualTLSMutate{CertificateAuthorityIDs: strs(MaxModuleListEntries+1, func(i int) string { return "ca_" + strings.Repeat("x", i+1) })}, "certificate_authority_ids", CodeInvalid),
		pass("compression", fromJSON[EndpointToggleMutate](`{}`)),
		pass("websocket_tcp_converter off", fromJSON[EndpointToggleMutate](`{"enabled": false}`)),
	})
}

// TestValidateTLSTermination: on TLS edges terminate_at is edge (the default) or upstream
// (ERR_NGROK_224), min_version is 1.0 to 1.3 (ERR_NGROK_219) and must be null when TLS passes
// through upstream; HTTPS edges always terminate at the edge and take only min_version.
func TestValidateTLSTermination(t *testing.T) {
	tls := fromJSON[EndpointTLSTerminationMutate]
	atEdge := fromJSON[EndpointTLSTerminationAtEdge]
	cases := []vcase{
		pass("defaults", tls(`{}`)),
		pass("edge", tls(`{"terminate_at": "edge"}`)),
		pass("empty terminate_at is edge", tls(`{"terminate_at": "", "min_version": "1.3"}`)),
		pass("upstream", tls(`{"terminate_at": "upstream"}`)),
		pass("upstream with null min_version", tls(`{"terminate_at": "upstream", "min_version": null}`)),
		failMsg("upstream with min_version", tls(`{"terminate_at": "upstream", "min_version": "1.2"}`), "min_version", CodeUnsupportedTLSVersion, "must be null"),
		failMsg("agent", tls(`{"terminate_at": "agent"}`), "terminate_at", CodeBadTerminateAt, `"edge" or "upstream"`),
		fail("edge in capitals", tls(`{"terminate_at": "EDGE"}`), "terminate_at", CodeBadTerminateAt),
		fail("terminate_at before min_version", tls(`{"terminate_at": "x", "min_version": "x"}`), "terminate_at", CodeBadTerminateAt),
		pass("at edge defaults", atEdge(`{}`)),
		pass("at edge disabled", atEdge(`{"enabled": false, "min_version": null}`)),
	}
	for _, v := range tlsVersions {
		cases = append(cases, pass("min_version "+v, tls(`{"min_version": "`+v+`"}`)), pass("at edge min_version "+v, atEdge(`{"min_version": "`+v+`"}`)))
	}
	for _, v := range []string{"1.4", "1", "1.20", "TLS1.2", "tls1.3", "", " 1.2"} {
		cases = append(cases,
			failMsg("min_version "+strconvQuote(v), tls(`{"min_version": "`+v+`"}`), "min_version", CodeUnsupportedTLSVersion, `"1.0", "1.1", "1.2", "1.3"`),
			fail("at edge min_version "+strconvQuote(v), atEdge(`{"min_version": "`+v+`"}`), "min_version", CodeUnsupportedTLSVersion))
	}
	runCases(t, cases)
}

func strconvQuote(s string) string { return `"` + s + `"` }

// TestValidateCircuitBreaker: error_threshold_percentage is a fraction from 0 to 1 (400
// ERR_NGROK_7011, also for a percentage such as 50) and num_buckets at most 128 (ERR_NGROK_7018;
// 0 takes the default). The other numbers are any uint32, 0 taking the default.
func TestValidateCircuitBreaker(t *testing.T) {
	cb := fromJSON[EndpointCircuitBreakerMutate]
	runCases(t, []vcase{
		pass("defaults", cb(`{}`)),
		pass("every field", cb(`{"enabled": true, "tripped_duration": 30, "rolling_window": 60, "num_buckets": 12, "volume_threshold": 100, "error_threshold_percentage": 0.3}`)),
		pass("threshold 0", cb(`{"error_threshold_percentage": 0}`)),
		pass("threshold 1", cb(`{"error_threshold_percentage": 1.0}`)),
		failMsg("threshold over 1", cb(`{"error_threshold_percentage": 1.01}`), "error_threshold_percentage", CodeBadErrorThreshold, "not 0-100"),
		fail("threshold as a percentage", cb(`{"error_threshold_percentage": 50}`), "error_threshold_percentage", CodeBadErrorThreshold),
		fail("negative threshold", cb(`{"error_threshold_percentage": -0.01}`), "error_threshold_percentage", CodeBadErrorThreshold),
		pass("0 buckets is the default", cb(`{"num_buckets": 0}`)),
		pass("1 bucket", cb(`{"num_buckets": 1}`)),
		pass("128 buckets", cb(`{"num_buckets": 128}`)),
		failMsg("129 buckets", cb(`{"num_buckets": 129}`), "num_buckets", CodeBadNumBuckets, "got 129"),
		fail("threshold before buckets", cb(`{"num_buckets": 1000, "error_threshold_percentage": 2}`), "error_threshold_percentage", CodeBadErrorThreshold),
		pass("largest durations", cb(`{"tripped_duration": 4294967295, "rolling_window": 4294967295, "volume_threshold": 4294967295}`)),
	})
}

// TestValidateHeaderModules: request_headers and response_headers add and remove headers named by
// RFC 9110 tokens, with values free of control characters but tab; hop-by-hop headers, Host and
// Content-Length can be neither added nor removed, in any case; a name added twice in two cases
// would be sent with its values in no set order, so it is refused as the HTTP response backend
// refuses it. Every refusal is 400 ERR_NGROK_215 naming add or remove.
func TestValidateHeaderModules(t *testing.T) {
	h := fromJSON[EndpointHeadersMutate]
	cases := []vcase{
		pass("empty", h(`{}`)),
		pass("add and remove", h(`{"add": {"X-Forwarded-Host": "a", "Server": "edge", "x-lower": ""}, "remove": ["X-Powered-By", "user-agent"]}`)),
		pass("token characters", h(`{"add": {"X-A!#$%&'*+-.^_|~1": "v"}}`)),
		pass("value with a tab, quotes and UTF-8", h(`{"add": {"X-A": "a\tb \"c\" é"}}`)),
		pass("null lists", h(`{"add": null, "remove": null}`)),
		failMsg("empty name", h(`{"add": {"": "v"}}`), "add", CodeInvalid, "not a valid HTTP header name"),
		fail("name with a space", h(`{"add": {"X A": "v"}}`), "add", CodeInvalid),
		fail("name with a colon", h(`{"add": {"X-A:": "v"}}`), "add", CodeInvalid),
		fail("name with a slash", h(`{"add": {"X/A": "v"}}`), "add", CodeInvalid),
		fail("name not ASCII", h(`{"add": {"X-Ä": "v"}}`), "add", CodeInvalid),
		failMsg("value with CR LF", h(`{"add": {"X-A": "a\r\nX-Evil: 1"}}`), "add", CodeInvalid, "characters not allowed"),
		fail("value with NUL", &EndpointHeadersMutate{Add: map[string]string{"X-A": "a\x00"}}, "add", CodeInvalid),
		fail("value with DEL", &EndpointHeadersMutate{Add: map[string]string{"X-A": "a\x7f"}}, "add", CodeInvalid),
		failMsg("first bad name in order", h(`{"add": {"b c": "", "a b": ""}}`), "add", CodeInvalid, `"a b"`),
		failMsg("same name in two cases", h(`{"add": {"X-Trace": "1", "x-trace": "2"}}`), "add", CodeInvalid, "same header name"),
		failMsg("remove empty name", h(`{"remove": ["X-A", ""]}`), "remove", CodeInvalid, "entry 1"),
		fail("remove name with a space", h(`{"remove": ["X A"]}`), "remove", CodeInvalid),
		pass("remove the same name twice", h(`{"remove": ["X-A", "x-a"]}`)),
		pass("add what is removed", h(`{"add": {"Server": "edge"}, "remove": ["server"]}`)),
		pass("64 headers to add", &EndpointHeadersMutate{Add: kv(MaxHeaderEntries, func(i int) (string, string) { return "X-H" + strings.Repeat("h", i), "v" })}),
		fail("65 headers to remove", &EndpointHeadersMutate{Remove: strs(MaxHeaderEntries+1, func(i int) string { return "X-H" + strings.Repeat("h", i) })}, "remove", CodeTooManyHeaders),
	}
	for name := range fixedHeaders {
		for _, n := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			cases = append(cases,
				failMsg("add "+n, &EndpointHeadersMutate{Add: map[string]string{n: "x"}}, "add", CodeInvalid, "cannot be added"),
				failMsg("remove "+n, &EndpointHeadersMutate{Remove: []string{"X-Ok", n}}, "remove", CodeInvalid, "entry 1"))
		}
	}
	for _, n := range []string{"X-Connection", "Connection-Id", "Hosts", "Content-Type", "Upgrade-Insecure-Requests", "Forwarded", "Authorization"} {
		cases = append(cases, pass("add "+n, &EndpointHeadersMutate{Add: map[string]string{n: "x"}}), pass("remove "+n, &EndpointHeadersMutate{Remove: []string{n}}))
	}
	runCases(t, cases)
}

// TestValidateWebhookVerification: the provider is one of the known ones, in any case (400
// ERR_NGROK_7030); sns verifies by certificate and takes no secret (ERR_NGROK_7026), every other
// provider needs one (ERR_NGROK_7027).
func TestValidateWebhookVerification(t *testing.T) {
	wh := fromJSON[EndpointWebhookValidationMutate]
	cases := []vcase{
		pass("sns without secret", wh(`{"provider": "sns"}`)),
		pass("sns with empty secret", wh(`{"provider": "SNS", "secret": ""}`)),
		pass("provider in another case", wh(`{"provider": "GitHub", "secret": "s"}`)),
		failMsg("no provider", wh(`{"secret": "s"}`), "provider", CodeProviderUnsupported, "is required"),
		fail("empty provider", wh(`{"provider": "", "secret": "s"}`), "provider", CodeProviderUnsupported),
		failMsg("unknown provider", wh(`{"provider": "myhooks", "secret": "s"}`), "provider", CodeProviderUnsupported, `"myhooks"`),
		fail("provider with a space", wh(`{"provider": "github ", "secret": "s"}`), "provider", CodeProviderUnsupported),
		failMsg("sns with a secret", wh(`{"provider": "sns", "secret": "s"}`), "secret", CodeProviderNoSecret, "must be empty"),
		failMsg("github without secret", wh(`{"provider": "github"}`), "secret", CodeProviderNeedsSecret, "is required"),
		fail("stripe with empty secret", wh(`{"provider": "stripe", "secret": ""}`), "secret", CodeProviderNeedsSecret),
		fail("provider before secret", wh(`{"provider": "x"}`), "provider", CodeProviderUnsupported),
	}
	for _, p := range WebhookProviders {
		if p != "sns" {
			cases = append(cases, pass(p, wh(`{"provider": "`+p+`", "secret": "s3cret"}`)))
		}
	}
	runCases(t, cases)
}

// costlyPolicy is a document under MaxTrafficPolicyBytes whose expressions are estimated to
// compile to more than MaxAccountPolicyCost: 10,000 expressions of three tokens.
func costlyPolicy() string {
	doc := `{"on_http_request":[{"expressions":["1>0"` + strings.Repeat(`,"1>0"`, 9999) + `],"actions":[{"type":"deny"}]}]}`
	if len(doc) > MaxTrafficPolicyBytes || TrafficPolicyCost(doc) <= MaxAccountPolicyCost {
		panic("costlyPolicy is not what it says")
	}
	return doc
}

// tp is a traffic_policy module with the document.
func tp(doc string) *EndpointTrafficPolicyMutate { return &EndpointTrafficPolicyMutate{Value: &doc} }

// TestValidateTrafficPolicyModule: the value is a JSON object or YAML mapping of at most 64 KiB
// that ngrok would accept as a traffic policy; a refusal is 400 ERR_NGROK_215 naming value, its
// message naming the part of the document at fault.
func TestValidateTrafficPolicyModule(t *testing.T) {
	const v = "value"
	runCases(t, []vcase{
		pass("empty YAML phase", tp("on_http_request: []")),
		pass("empty JSON object", tp("{}")),
		pass("JSON rule", fromJSON[EndpointTrafficPolicyMutate](`{"value": "{\"on_http_request\": [{\"expressions\": [\"req.method == 'POST'\"], \"actions\": [{\"type\": \"deny\"}]}]}"}`)),
		pass("YAML rules in every phase", tp("on_tcp_connect:\n  - actions: [{type: deny}]\non_http_request:\n  - name: n\n    expressions: [\"req.url.path.startsWith('/admin')\"]\n    actions:\n      - type: add-headers\n        config: {headers: {X-A: b}}\non_http_response:\n  - actions: [{type: remove-headers, config: {headers: [Server]}}]\n")),
		pass("null phase", tp("on_http_response: null")),
		pass("64 KiB", tp(policyOfSize(MaxTrafficPolicyBytes))),
		failMsg("no value", fromJSON[EndpointTrafficPolicyMutate](`{"enabled": true}`), v, CodeInvalid, "is required"),
		fail("empty value", tp(""), v, CodeInvalid),
		fail("blank value", tp(" \n\t"), v, CodeInvalid),
		failMsg("64 KiB and a byte", tp(policyOfSize(MaxTrafficPolicyBytes+1)), v, CodeInvalid, "at most 65536 bytes"),
		failMsg("64 KiB that could never be compiled into a plan", tp(costlyPolicy()), v, CodeInvalid, "MaxAccountPolicyCost"),
		failMsg("malformed JSON", tp(`{"on_http_request": [}`), v, CodeInvalid, "not a valid JSON object"),
		failMsg("a YAML list", tp("- on_http_request: []"), v, CodeInvalid, "neither a JSON object nor a YAML mapping"),
		fail("a JSON list", tp(`[{"on_http_request": []}]`), v, CodeInvalid),
		fail("a YAML scalar", tp("deny"), v, CodeInvalid),
		failMsg("unknown phase", tp("on_connect: []"), v, CodeInvalid, `"on_connect" is not a traffic policy phase`),
		failMsg("phase not a list", tp("on_http_request: {actions: []}"), v, CodeInvalid, "on_http_request: must be a list"),
		failMsg("rule without actions", tp("on_http_request: [{expressions: [\"true\"]}]"), v, CodeInvalid, "on_http_request[0].actions"),
		failMsg("unknown rule field", tp("on_http_request: [{actions: [{type: deny}], when: x}]"), v, CodeInvalid, `unknown field "when"`),
		failMsg("bad CEL expression", tp("on_http_request: [{actions: [{type: deny}]}, {expressions: [\"req.method ==\"], actions: [{type: deny}]}]"), v, CodeInvalid, "on_http_request[1].expressions[0]"),
		failMsg("unknown CEL variable", tp("on_http_request: [{expressions: [\"true\", \"request.method == 'GET'\"], actions: [{type: deny}]}]"), v, CodeInvalid, "on_http_request[0].expressions[1]"),
		failMsg("CEL expression not a bool", tp("on_http_request: [{expressions: [\"req.method\"], actions: [{type: deny}]}]"), v, CodeInvalid, "on_http_request[0].expressions[0]"),
		failMsg("HTTP variable on TCP", tp("on_tcp_connect: [{expressions: [\"req.method == 'GET'\"], actions: [{type: deny}]}]"), v, CodeInvalid, "on_tcp_connect[0].expressions[0]"),
		failMsg("unknown action", tp("on_http_request: [{actions: [{type: deny}, {type: teleport}]}]"), v, CodeInvalid, `on_http_request[0].actions[1].type: "teleport" is not a traffic policy action`),
		failMsg("action without type", tp("on_http_request: [{actions: [{config: {}}]}]"), v, CodeInvalid, "on_http_request[0].actions[0].type: is required"),
		failMsg("action in the wrong phase", tp("on_http_request: [{actions: [{type: terminate-tls}]}]"), v, CodeInvalid, "cannot be used in on_http_request"),
		failMsg("response action on requests", tp("on_http_request: [{actions: [{type: owasp-crs-response}]}]"), v, CodeInvalid, "on_http_request[0].actions[0].type"),
		failMsg("unknown action field", tp("on_http_request: [{actions: [{type: deny, with: {}}]}]"), v, CodeInvalid, `unknown field "with"`),
		failMsg("adding Host", tp("on_http_request: [{actions: [{type: add-headers, config: {headers: {host: evil.example}}}]}]"), v, CodeInvalid, "on_http_request[0].actions[0].config.headers"),
		failMsg("removing Connection", tp("on_http_response: [{actions: [{type: remove-headers, config: {headers: [X-A, connection]}}]}]"), v, CodeInvalid, "cannot be added or removed"),
		failMsg("bad interpolation", tp("on_http_request: [{actions: [{type: custom-response, config: {status_code: 200, body: \"${req.nope(}\"}}]}]"), v, CodeInvalid, "on_http_request[0].actions[0].config.body"),
	})
}

// moduleCheck runs a parent document's rules across its modules as a validator.
type moduleCheck struct{ doc ModuleChecker }

func (m moduleCheck) Validate() error { return m.doc.CheckModules() }

// TestValidateAcrossModules: a TLS edge passing TLS through upstream cannot have mutual_tls (400
// ERR_NGROK_7062), and a route has at most one of oauth, saml and oidc (ERR_NGROK_7079, naming
// the second), configured being enough, enabled or not.
func TestValidateAcrossModules(t *testing.T) {
	upstream := &EndpointTLSTermination{TerminateAt: terminateUpstream}
	edge := &EndpointTLSTermination{TerminateAt: terminateEdge}
	mtls := &EndpointMutualTLS{Enabled: true}
	oauth, saml, oidc := &EndpointOAuth{}, &EndpointSAML{}, &EndpointOIDC{}
	runCases(t, []vcase{
		pass("TLS edge with nothing", moduleCheck{&TLSEdge{}}),
		pass("TLS edge mutual TLS at the edge", moduleCheck{&TLSEdge{TLSTermination: edge, MutualTLS: mtls}}),
		pass("TLS edge mutual TLS without termination module", moduleCheck{&TLSEdge{MutualTLS: mtls}}),
		pass("TLS edge upstream without mutual TLS", moduleCheck{&TLSEdge{TLSTermination: upstream}}),
		failMsg("TLS edge mutual TLS upstream", moduleCheck{&TLSEdge{TLSTermination: upstream, MutualTLS: mtls}}, "mutual_tls", CodeNeedsEdgeTermination, `"upstream"`),
		fail("TLS edge disabled mutual TLS upstream", moduleCheck{&TLSEdge{TLSTermination: upstream, MutualTLS: &EndpointMutualTLS{}}}, "mutual_tls", CodeNeedsEdgeTermination),
		pass("route with oauth", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{OAuth: oauth}}}),
		pass("route with saml", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{SAML: saml}}}),
		pass("route with oidc and the filters", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{OIDC: oidc, UserAgentFilter: &EndpointUserAgentFilter{}, JWTValidation: &EndpointJWTValidation{}}}}),
		failMsg("route with oauth and saml", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{OAuth: oauth, SAML: saml}}}, "saml", CodeOneAuthModule, "both oauth and saml"),
		fail("route with saml and oidc", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{SAML: saml, OIDC: oidc}}}, "oidc", CodeOneAuthModule),
		fail("route with oauth and disabled oidc", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{OAuth: &EndpointOAuth{Enabled: true}, OIDC: oidc}}}, "oidc", CodeOneAuthModule),
		fail("route with all three", moduleCheck{&HTTPSEdgeRoute{routeAuth: routeAuth{OAuth: oauth, SAML: saml, OIDC: oidc}}}, "saml", CodeOneAuthModule),
	})
}
