package server_test

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

func TestCredentialACL(t *testing.T) {
	e := newEnv(t)
	valid := []string{
		"*", "bind:example.com", "bind:App.Example.com", "bind:*.example.com", "bind:1.tcp.example.com:12345",
		"bind:10.0.0.1:443", "bind:[2001:db8::1]:8443", "bind:edge=web", "bind:*=web", "bind:dc=*", "bind:*=*",
	}
	r := e.do(e.admin.token, "POST", "/credentials", map[string]any{"acl": valid}).must(t, 201)
	if !equalJSON(r.body["acl"], toAny(valid)) {
		t.Fatalf("acl stored as %v", r.body["acl"])
	}
	id := r.str("id")
	invalid := []string{
		"", "connect:example.com", "bind:", "bind:*", "bind:*.", "bind:a.*.example.com", "bind:exa mple.com",
		"bind:localhost", "bind:-bad.example.com", "bind:example.com:0", "bind:example.com:65536", "bind:example.com:http",
		"bind::80", "bind:=v", "bind:k=", "bind:k=v w", "bind:[::1", "*.example.com", "bind:" + strings.Repeat("a", 64) + ".com",
	}
	for _, rule := range invalid {
		t.Run(rule, func(t *testing.T) {
			r := e.do(e.admin.token, "POST", "/credentials", map[string]any{"acl": []string{"bind:ok.example.com", rule}}).wantError(t, 400, ep.CodeBadACLRule)
			if !strings.Contains(r.msg(), quoteJSON(rule)) || !strings.HasPrefix(r.msg(), "acl[1]") {
				t.Fatalf("message should quote the rule and its position: %s", r.msg())
			}
			e.do(e.admin.token, "PATCH", "/credentials/"+id, map[string]any{"acl": []string{rule}}).wantError(t, 400, ep.CodeBadACLRule)
		})
	}
	// [] clears the ACL; null leaves it.
	e.do(e.admin.token, "PATCH", "/credentials/"+id, map[string]any{"acl": nil}).must(t, 200)
	if got := e.do(e.admin.token, "GET", "/credentials/"+id, nil).must(t, 200); !equalJSON(got.body["acl"], toAny(valid)) {
		t.Fatalf("null acl changed it: %s", got.raw)
	}
	if got := e.do(e.admin.token, "PATCH", "/credentials/"+id, map[string]any{"acl": []string{}}).must(t, 200); !equalJSON(got.body["acl"], []any{}) {
		t.Fatalf("[] did not clear acl: %s", got.raw)
	}
	e.do(e.admin.token, "POST", "/credentials", map[string]any{"acl": "bind:x.com"}).wantError(t, 400, ep.CodeInvalid)
}

func TestIPPolicyRules(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	policy := e.do(tok, "POST", "/ip_policies", map[string]any{"description": "office"}).must(t, 201).str("id")
	rule := func(cidr, action string) map[string]any {
		return map[string]any{"ip_policy_id": policy, "cidr": cidr, "action": action}
	}
	for in, want := range map[string]string{
		"10.0.0.0/8": "10.0.0.0/8", "192.168.1.7": "192.168.1.7/32", "2001:db8::/32": "2001:db8::/32",
		"2001:db8::1": "2001:db8::1/128", "0.0.0.0/0": "0.0.0.0/0", "::/0": "::/0",
	} {
		r := e.do(tok, "POST", "/ip_policy_rules", rule(in, "deny")).must(t, 201)
		if r.str("cidr") != want || r.str("action") != "deny" {
			t.Fatalf("%s stored as %s", in, r.raw)
		}
		ref, _ := r.body["ip_policy"].(map[string]any)
		if ref["id"] != policy || ref["uri"] != e.base+"/ip_policies/"+policy {
			t.Fatalf("ip_policy ref: %v", ref)
		}
	}
	for _, bad := range []string{"", "abc", "10.0.0.0/33", "10.0.0.1/8", "300.1.1.1", "fe80::1%eth0", "10.0.0.0/", "2001:db8::1/64"} {
		r := e.do(tok, "POST", "/ip_policy_rules", rule(bad, "allow")).wantError(t, 400, ep.CodeBadCIDR)
		if !strings.HasPrefix(r.msg(), "cidr") {
			t.Fatalf("message should name cidr: %s", r.msg())
		}
	}
	e.do(tok, "POST", "/ip_policy_rules", map[string]any{"ip_policy_id": policy, "action": "allow"}).wantError(t, 400, ep.CodeBadCIDR)
	for _, bad := range []any{"ALLOW", "permit", ""} {
		e.do(tok, "POST", "/ip_policy_rules", rule("10.0.0.0/8", bad.(string))).wantError(t, 400, ep.CodeBadAction)
	}
	e.do(tok, "POST", "/ip_policy_rules", map[string]any{"ip_policy_id": policy, "cidr": "10.0.0.0/8"}).wantError(t, 400, ep.CodeBadAction)
	e.do(tok, "POST", "/ip_policy_rules", map[string]any{"cidr": "10.0.0.0/8", "action": "allow"}).wantError(t, 400, ep.CodeIPPolicyMissing)
	missing, _ := ep.NewID("ipp")
	e.do(tok, "POST", "/ip_policy_rules", map[string]any{"ip_policy_id": missing, "cidr": "10.0.0.0/8", "action": "allow"}).wantError(t, 400, ep.CodeIPPolicyMissing)
	other := e.newAccount("other")
	otherPolicy := e.do(other.token, "POST", "/ip_policies", nil).must(t, 201).str("id")
	r := e.do(tok, "POST", "/ip_policy_rules", map[string]any{"ip_policy_id": otherPolicy, "cidr": "10.0.0.0/8", "action": "allow"}).wantError(t, 400, ep.CodeIPPolicyMissing)
	if !strings.HasPrefix(r.msg(), "ip_policy_id") {
		t.Fatalf("message should name ip_policy_id: %s", r.msg())
	}

	id := e.do(tok, "POST", "/ip_policy_rules", rule("10.1.0.0/16", "allow")).must(t, 201).str("id")
	e.do(tok, "PATCH", "/ip_policy_rules/"+id, map[string]any{"cidr": "nope"}).wantError(t, 400, ep.CodeBadCIDR)
	e.do(tok, "PATCH", "/ip_policy_rules/"+id, map[string]any{"ip_policy_id": otherPolicy}).wantError(t, 400, ep.CodeUnknownField)
	e.do(tok, "PATCH", "/ip_policy_rules/"+id, map[string]any{"action": "deny"}).wantError(t, 400, ep.CodeUnknownField)
	if got := e.do(tok, "PATCH", "/ip_policy_rules/"+id, map[string]any{"cidr": "172.16.0.1"}).must(t, 200); got.str("cidr") != "172.16.0.1/32" || got.str("action") != "allow" {
		t.Fatalf("patched rule: %s", got.raw)
	}

	// Deleting the policy deletes its rules.
	e.do(tok, "DELETE", "/ip_policies/"+policy, nil).must(t, 204)
	e.do(tok, "GET", "/ip_policy_rules/"+id, nil).wantError(t, 404, ep.CodeNotFound)
	if n := len(e.do(tok, "GET", "/ip_policy_rules", nil).must(t, 200).items(t, "ip_policy_rules")); n != 0 {
		t.Fatalf("%d rules survived their policy", n)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func quoteJSON(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}
