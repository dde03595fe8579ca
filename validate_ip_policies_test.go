package edgeplane

import "testing"

// rule is an IP policy rule create body.
func rule(cidr, action, policy string) *IPPolicyRuleCreate {
	return &IPPolicyRuleCreate{CIDR: &cidr, Action: &action, IPPolicyID: &policy}
}

// TestValidateIPPolicyRules: a rule needs a CIDR range or single address (400 ERR_NGROK_1406
// otherwise, also for host bits set after the prefix length), an action of allow or deny
// (ERR_NGROK_1422) and a policy (ERR_NGROK_7007), checked in that order. An update may change
// only the CIDR, under the same rule.
func TestValidateIPPolicyRules(t *testing.T) {
	runCases(t, []vcase{
		pass("IPv4 range", fromJSON[IPPolicyRuleCreate](`{"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": "ipp_x"}`)),
		pass("deny", rule("192.0.2.0/24", "deny", "ipp_x")),
		pass("IPv4 address", rule("192.0.2.1", "allow", "ipp_x")),
		pass("IPv4 /32", rule("192.0.2.1/32", "allow", "ipp_x")),
		pass("everything IPv4", rule("0.0.0.0/0", "allow", "ipp_x")),
		pass("IPv6 range", rule("2001:db8::/32", "deny", "ipp_x")),
		pass("IPv6 address", rule("2001:DB8::1", "deny", "ipp_x")),
		pass("everything IPv6", rule("::/0", "deny", "ipp_x")),
		pass("IPv4-mapped IPv6", rule("::ffff:192.0.2.0/120", "allow", "ipp_x")),
		pass("with annotations", fromJSON[IPPolicyRuleCreate](`{"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": "ipp_x", "description": "office", "metadata": "{}"}`)),
		failMsg("no cidr", fromJSON[IPPolicyRuleCreate](`{"action": "allow", "ip_policy_id": "ipp_x"}`), "cidr", CodeBadCIDR, "is required"),
		fail("empty cidr", rule("", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		failMsg("host bits set", rule("10.0.0.1/8", "allow", "ipp_x"), "cidr", CodeBadCIDR, `did you mean "10.0.0.0/8"`),
		failMsg("IPv6 host bits set", rule("2001:db8::1/32", "allow", "ipp_x"), "cidr", CodeBadCIDR, `"2001:db8::/32"`),
		fail("prefix length 33", rule("10.0.0.0/33", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("IPv6 prefix length 129", rule("2001:db8::/129", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("leading zero in an octet", rule("010.0.0.0/8", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("leading zero in the length", rule("10.0.0.0/08", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("no length after the slash", rule("10.0.0.0/", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("three octets", rule("10.0.0/24", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("zone", rule("fe80::1%eth0", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("hostname", rule("example.com", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("surrounding space", rule(" 10.0.0.0/8", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		fail("range of addresses", rule("10.0.0.1-10.0.0.9", "allow", "ipp_x"), "cidr", CodeBadCIDR),
		failMsg("no action", fromJSON[IPPolicyRuleCreate](`{"cidr": "10.0.0.0/8", "ip_policy_id": "ipp_x"}`), "action", CodeBadAction, "got nothing"),
		failMsg("action in capitals", rule("10.0.0.0/8", "ALLOW", "ipp_x"), "action", CodeBadAction, `got "ALLOW"`),
		fail("empty action", rule("10.0.0.0/8", "", "ipp_x"), "action", CodeBadAction),
		fail("other action", rule("10.0.0.0/8", "reject", "ipp_x"), "action", CodeBadAction),
		failMsg("no policy", fromJSON[IPPolicyRuleCreate](`{"cidr": "10.0.0.0/8", "action": "deny"}`), "ip_policy_id", CodeIPPolicyMissing, "is required"),
		fail("empty policy", rule("10.0.0.0/8", "deny", ""), "ip_policy_id", CodeIPPolicyMissing),
		fail("cidr checked before the action", rule("nope", "nope", ""), "cidr", CodeBadCIDR),
		fail("action checked before the policy", rule("10.0.0.0/8", "nope", ""), "action", CodeBadAction),
		pass("update of nothing", fromJSON[IPPolicyRuleUpdate](`{}`)),
		pass("update of the cidr", fromJSON[IPPolicyRuleUpdate](`{"cidr": "10.1.0.0/16"}`)),
		pass("update to an address", fromJSON[IPPolicyRuleUpdate](`{"cidr": "2001:db8::7"}`)),
		fail("update to an empty cidr", fromJSON[IPPolicyRuleUpdate](`{"cidr": ""}`), "cidr", CodeBadCIDR),
		fail("update with host bits", fromJSON[IPPolicyRuleUpdate](`{"cidr": "10.1.2.3/16"}`), "cidr", CodeBadCIDR),
		fail("update annotations first", fromJSON[IPPolicyRuleUpdate](`{"description": "a\nb", "cidr": "x"}`), "description", CodeInvalid),
	})
}

// TestValidateIPPolicyRulesCanonical: Validate stores the CIDR in canonical form: an address
// becomes a /32 or /128, IPv6 is lowercased and shortened, and an IPv4-mapped IPv6 range becomes
// its IPv4 range (the data plane matches clients by their IPv4 address, which the mapped form
// never contains: as written, a deny rule would deny nobody).
func TestValidateIPPolicyRulesCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":               "192.0.2.1/32",
		"2001:DB8:0:0::1":         "2001:db8::1/128",
		"2001:0db8:0000::/32":     "2001:db8::/32",
		"::ffff:192.0.2.1":        "192.0.2.1/32",
		"::ffff:192.0.2.0/120":    "192.0.2.0/24",
		"::ffff:0.0.0.0/96":       "0.0.0.0/0",
		"::ffff:c000:200/119":     "192.0.2.0/23",
		"::/0":                    "::/0",
		"10.0.0.0/8":              "10.0.0.0/8",
		"2001:db8:0:0:0:0:0:0/64": "2001:db8::/64",
	} {
		c := rule(in, "allow", "ipp_x")
		if err := c.Validate(); err != nil || *c.CIDR != want {
			t.Errorf("create %q: cidr %q, %v; want %q", in, *c.CIDR, err, want)
		}
		u := &IPPolicyRuleUpdate{CIDR: ptr(in)}
		if err := u.Validate(); err != nil || *u.CIDR != want {
			t.Errorf("update %q: cidr %q, %v; want %q", in, *u.CIDR, err, want)
		}
	}
}
