package edgeplane

import (
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets of the domain's text grammars. `go test` runs them on their seed corpora
// (testdata/fuzz/<name>); `go test -run=^$ -fuzz=^FuzzValidateACL$ .` explores further.

// FuzzValidateACL: the credential ACL grammar never panics; a refusal is always 400
// ERR_NGROK_600 naming the first bad rule; a list is valid exactly when each of its rules is; and
// what it accepts is printable ASCII without spaces (an ACL rule ends up in an agent's bind
// check, where a control character or a space has no business).
func FuzzValidateACL(f *testing.F) {
	for _, s := range []string{"*", "bind:example.com", "bind:*.example.com", "bind:app.example.com:443",
		"bind:[2001:db8::1]:8080", "bind:edge=web", "bind:*=*", "bind:*", "connect:x", "bind:a.b:0",
		"bind:example.com\nbind:*.example.org\nbind:k=v", "bind:[fe80::1%eth0]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rules := strings.Split(text, "\n")
		firstBad := -1
		for i, r := range rules {
			err := ValidateACL([]string{r})
			if err == nil {
				checkACLRuleText(t, r)
				continue
			}
			checkACLError(t, err, 0)
			if firstBad < 0 {
				firstBad = i
			}
		}
		err := ValidateACL(rules)
		switch {
		case firstBad < 0 && err != nil:
			t.Fatalf("every rule of %q is valid alone, but the list is refused: %v", rules, err)
		case firstBad >= 0 && err == nil:
			t.Fatalf("rule %d of %q is refused alone, but the list is accepted", firstBad, rules)
		case err != nil:
			checkACLError(t, err, firstBad)
		}
	})
}

func checkACLError(t *testing.T, err error, index int) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("ValidateACL returned a %T, not an *Error (a 500 on the wire): %v", err, err)
	}
	if e.Status != http.StatusBadRequest || e.Code != CodeBadACLRule || e.Msg == "" {
		t.Fatalf("ValidateACL error: status %d code %d msg %q", e.Status, e.Code, e.Msg)
	}
	if want := "acl[" + strconv.Itoa(index) + "]"; e.Field != want || !strings.HasPrefix(e.Msg, want) {
		t.Fatalf("ValidateACL error names field %q (msg %q), want %s", e.Field, e.Msg, want)
	}
}

func checkACLRuleText(t *testing.T, rule string) {
	t.Helper()
	for i := 0; i < len(rule); i++ {
		if c := rule[i]; c <= ' ' || c >= 0x7f {
			t.Fatalf("ValidateACL accepts %q, which holds byte %#x at %d", rule, c, i)
		}
	}
	if rule != "*" && !strings.HasPrefix(rule, "bind:") {
		t.Fatalf("ValidateACL accepts %q, which is neither * nor a bind rule", rule)
	}
}

// FuzzCanonicalCIDR: CIDR parsing never panics; a refusal is 400 ERR_NGROK_1406 naming cidr;
// what it accepts comes back canonical (a masked prefix in netip's form) and is a fixed point:
// the canonical text parses again to itself.
func FuzzCanonicalCIDR(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32", "2001:db8::1", "10.0.0.1/8", "0.0.0.0/0",
		"::/0", "::ffff:192.0.2.1", "::ffff:192.0.2.0/120", "fe80::1%eth0", "1.2.3.4/33", "010.0.0.0/8", "10.0.0.0/08", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := CanonicalCIDR(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("CanonicalCIDR(%q) returned a %T, not an *Error: %v", s, err, err)
			}
			if e.Status != http.StatusBadRequest || e.Code != CodeBadCIDR || e.Field != "cidr" || e.Msg == "" {
				t.Fatalf("CanonicalCIDR(%q) error: status %d code %d field %q msg %q", s, e.Status, e.Code, e.Field, e.Msg)
			}
			return
		}
		p, perr := netip.ParsePrefix(out)
		if perr != nil {
			t.Fatalf("CanonicalCIDR(%q) = %q, which is not a prefix: %v", s, out, perr)
		}
		if p.Masked() != p || p.String() != out {
			t.Fatalf("CanonicalCIDR(%q) = %q, not canonical (masked %s, string %s)", s, out, p.Masked(), p)
		}
		again, err := CanonicalCIDR(out)
		if err != nil || again != out {
			t.Fatalf("CanonicalCIDR(%q) = %q, but CanonicalCIDR(%q) = %q, %v", s, out, out, again, err)
		}
	})
}
