package server_test

import (
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestUnstorableIDs: an id holding a NUL byte or invalid UTF-8, which PostgreSQL text cannot
// hold, is an id of nothing like any other: 404 in a path, an ordinary cursor in before_id, and
// in a body refused like every string with a control character. Never a 500 (found by TestHostileRequests on
// PostgreSQL, where such an id reached a query as it was).
func TestUnstorableIDs(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	k := edgeKit{e, e.admin}
	edge, tlsEdge := k.httpsEdge(), k.tlsEdge()
	route := k.route(edge)
	for _, bad := range []string{"%00", "%FF", "ipp_%00", "ipp_3MPvW0lhhsKGYY3Wa2DA32K%FFzhn", "edghts_%C3%28"} {
		for _, c := range []struct{ method, path string }{
			{"GET", "/ip_policies/" + bad}, {"PATCH", "/ip_policies/" + bad}, {"DELETE", "/ip_policies/" + bad},
			{"GET", "/edges/https/" + bad + "/routes"}, {"POST", "/edges/https/" + bad + "/routes"},
			{"GET", "/edges/https/" + edge + "/routes/" + bad}, {"GET", "/edges/https/" + bad + "/routes/" + route},
			{"PUT", "/edges/tls/" + bad + "/traffic_policy"}, {"DELETE", "/edges/tls/" + bad + "/backend"},
			{"DELETE", "/reserved_domains/" + bad + "/certificate"},
		} {
			var body any
			switch c.method {
			case "PATCH", "POST":
				body = map[string]any{"description": "x"}
			case "PUT":
				body = map[string]any{"value": "{}"}
			}
			if c.method == "POST" {
				body = map[string]any{"match_type": "path_prefix", "match": "/x"}
			}
			r := e.do(tok, c.method, c.path, body)
			if r.status != 404 {
				t.Errorf("%s %s: status %d, want 404: %s", c.method, c.path, r.status, r.raw)
				continue
			}
			r.wantError(t, 404, ep.CodeNotFound)
		}
		if r := e.do(tok, "GET", "/ip_policies?before_id="+bad, nil); r.status != 200 && r.status != 400 {
			t.Errorf("GET /ip_policies?before_id=%s: status %d: %s", bad, r.status, r.raw)
		}
	}
	// In a body, a NUL is a control character, which no string field may hold: 400 naming the
	// field, before the id is looked up.
	const nul = `x_\u0000`
	for _, c := range []struct {
		method, path, body, field string
	}{
		{"POST", "/ip_policy_rules", `{"ip_policy_id": "` + nul + `", "cidr": "10.0.0.0/8", "action": "allow"}`, "ip_policy_id"},
		{"POST", "/api_keys", `{"owner_id": "` + nul + `"}`, "owner_id"},
		{"POST", "/reserved_domains", `{"domain": "` + freshDomain("nul") + `", "certificate_id": "` + nul + `"}`, "certificate_id"},
		{"POST", "/ssh_user_certificates", `{"ssh_certificate_authority_id": "` + nul + `", "public_key": "` + testPKI(t).sshEd25519 + `"}`, "ssh_certificate_authority_id"},
		{"POST", "/backends/failover", `{"backends": ["` + nul + `"]}`, "backends"},
		{"PUT", "/edges/tls/" + tlsEdge + "/backend", `{"backend_id": "` + nul + `"}`, "backend_id"},
		{"PUT", "/edges/tls/" + tlsEdge + "/ip_restriction", `{"ip_policy_ids": ["` + nul + `"]}`, "ip_policy_ids"},
		{"PUT", "/edges/https/" + edge + "/mutual_tls", `{"module": {"certificate_authority_ids": ["` + nul + `"]}}`, "module.certificate_authority_ids"},
	} {
		r := e.do(tok, c.method, c.path, c.body)
		if r.status >= 500 {
			t.Errorf("%s %s %s: status %d: %s", c.method, c.path, c.body, r.status, r.raw)
			continue
		}
		r.wantError(t, 400, ep.CodeInvalid)
		if f := r.body["details"].(map[string]any)["field"]; f != c.field {
			t.Errorf("%s %s %s: field %v, want %s", c.method, c.path, c.body, f, c.field)
		}
	}
}
