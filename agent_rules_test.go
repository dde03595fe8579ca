package edgeplane

import "testing"

// TestACLPermits walks the credential ACL rules the gateway enforces at bind time.
func TestACLPermits(t *testing.T) {
	cases := []struct {
		name string
		acl  []string
		t    ACLTarget
		want bool
	}{
		{"no rules allow a name", nil, ACLTarget{Name: "a.example.com"}, true},
		{"no rules allow a random port", []string{}, ACLTarget{RandomTCP: true}, true},
		{"* allows a name", []string{"*"}, ACLTarget{Name: "a.example.com"}, true},
		{"* allows a random port", []string{"bind:x.example.com", "*"}, ACLTarget{RandomTCP: true}, true},
		{"exact name", []string{"bind:a.example.com"}, ACLTarget{Name: "a.example.com"}, true},
		{"exact name, other case", []string{"bind:A.Example.com"}, ACLTarget{Name: "a.example.COM"}, true},
		{"exact name does not cover a subdomain", []string{"bind:example.com"}, ACLTarget{Name: "a.example.com"}, false},
		{"wildcard covers a subdomain", []string{"bind:*.example.com"}, ACLTarget{Name: "a.example.com"}, true},
		{"wildcard covers deeper names", []string{"bind:*.example.com"}, ACLTarget{Name: "a.b.example.com"}, true},
		{"wildcard covers itself", []string{"bind:*.example.com"}, ACLTarget{Name: "*.example.com"}, true},
		{"wildcard does not cover the apex", []string{"bind:*.example.com"}, ACLTarget{Name: "example.com"}, false},
		{"wildcard does not cover a lookalike", []string{"bind:*.example.com"}, ACLTarget{Name: "badexample.com"}, false},
		{"a name rule does not allow an address", []string{"bind:a.example.com"}, ACLTarget{Addr: "a.example.com:80"}, false},
		{"address", []string{"bind:1.tcp.example.com:12345"}, ACLTarget{Addr: "1.tcp.example.com:12345"}, true},
		{"address, other port", []string{"bind:1.tcp.example.com:12345"}, ACLTarget{Addr: "1.tcp.example.com:12346"}, false},
		{"rules refuse a random port", []string{"bind:*.example.com"}, ACLTarget{RandomTCP: true}, false},
		{"label", []string{"bind:edge=edghts_1"}, ACLTarget{Labels: map[string]string{"edge": "edghts_1"}}, true},
		{"label, other value", []string{"bind:edge=edghts_1"}, ACLTarget{Labels: map[string]string{"edge": "edghts_2"}}, false},
		{"label value wildcard", []string{"bind:edge=*"}, ACLTarget{Labels: map[string]string{"edge": "x"}}, true},
		{"label key wildcard", []string{"bind:*=x"}, ACLTarget{Labels: map[string]string{"any": "x"}}, true},
		{"every label must be allowed", []string{"bind:a=1"}, ACLTarget{Labels: map[string]string{"a": "1", "b": "2"}}, false},
		{"labels allowed by several rules", []string{"bind:a=1", "bind:b=*"}, ACLTarget{Labels: map[string]string{"a": "1", "b": "2"}}, true},
		{"a label rule does not allow a name", []string{"bind:a=1"}, ACLTarget{Name: "a"}, false},
	}
	for _, c := range cases {
		if got, _ := ACLPermits(c.acl, c.t); got != c.want {
			t.Errorf("%s: ACLPermits(%q, %+v) = %v, want %v", c.name, c.acl, c.t, got, c.want)
		}
	}
	if _, refused := ACLPermits([]string{"bind:a=1"}, ACLTarget{Labels: map[string]string{"b": "2"}}); refused != "b=2" {
		t.Errorf("the refused label is reported as %q, want b=2", refused)
	}
	// Every rule the API accepts is one the matcher understands: the shared grammar.
	for _, rule := range []string{"*", "bind:a.example.com", "bind:*.example.com", "bind:h.example.com:1", "bind:k=v", "bind:*=*"} {
		if err := ValidateACL([]string{rule}); err != nil {
			t.Errorf("ValidateACL(%q): %v", rule, err)
		}
	}
}

// TestDomainClaimsFor: a name is covered by its own reservation, then the wildcard one level up.
func TestDomainClaimsFor(t *testing.T) {
	got := DomainClaimsFor("app.example.com")
	if len(got) != 2 || got[0] != "app.example.com" || got[1] != "*.example.com" {
		t.Errorf("DomainClaimsFor = %q", got)
	}
	if got := DomainClaimsFor("localhost"); len(got) != 1 {
		t.Errorf("DomainClaimsFor(localhost) = %q", got)
	}
}
