package enforce

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestIPFilter walks the decision order: deny first, then allow, then refuse when any allow
// rule exists; IPv4 and IPv6, and IPv4-mapped addresses matched as IPv4.
func TestIPFilter(t *testing.T) {
	cases := []struct {
		name        string
		allow, deny []string
		client      string
		want        bool
	}{
		{"no rules admit", nil, nil, "192.0.2.1", true},
		{"deny matches", nil, []string{"192.0.2.0/24"}, "192.0.2.1", false},
		{"deny does not match", nil, []string{"192.0.2.0/24"}, "198.51.100.1", true},
		{"allow matches", []string{"192.0.2.0/24"}, nil, "192.0.2.9", true},
		{"allow does not match", []string{"192.0.2.0/24"}, nil, "198.51.100.1", false},
		{"deny beats allow", []string{"192.0.2.0/24"}, []string{"192.0.2.7/32"}, "192.0.2.7", false},
		{"allow beside deny", []string{"192.0.2.0/24"}, []string{"192.0.2.7/32"}, "192.0.2.8", true},
		{"v6 allow", []string{"2001:db8::/32"}, nil, "2001:db8::1", true},
		{"v6 refused by v4 allow", []string{"192.0.2.0/24"}, nil, "2001:db8::1", false},
		{"v6 deny", nil, []string{"2001:db8::/32"}, "2001:db8:1::1", false},
		{"mapped v4 matched as v4", []string{"192.0.2.0/24"}, nil, "::ffff:192.0.2.1", true},
		{"a bare address is a /32", []string{"192.0.2.1"}, nil, "192.0.2.1", true},
	}
	for _, c := range cases {
		f, err := NewIPFilter(c.allow, c.deny)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := f.AllowConn(netip.MustParseAddr(c.client)); got != c.want {
			t.Errorf("%s: %s admitted = %v, want %v", c.name, c.client, got, c.want)
		}
	}
	if _, err := NewIPFilter([]string{"nonsense"}, nil); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("a bad CIDR: %v", err)
	}
}

// TestBasicAuth: the right credentials pass; anything else gets 401 with a challenge.
func TestBasicAuth(t *testing.T) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("hashed-pw"), bcrypt.MinCost)
	b, err := NewBasicAuth([]BasicCredential{{Username: "ann", CleartextPassword: "pw"}, {Username: "bob", HashedPassword: hash}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user, pass string
		set        bool
		want       bool
	}{{"ann", "pw", true, true}, {"bob", "hashed-pw", true, true}, {"ann", "nope", true, false},
		{"bob", "pw", true, false}, {"carl", "pw", true, false}, {"", "", false, false}} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.set {
			r.SetBasicAuth(c.user, c.pass)
		}
		w := httptest.NewRecorder()
		got := false
		b.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got = true })).ServeHTTP(w, r)
		if got != c.want {
			t.Errorf("%s:%s admitted = %v, want %v", c.user, c.pass, got, c.want)
		}
		if !got && (w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3401") {
			t.Errorf("%s:%s refusal: %d %q %q", c.user, c.pass, w.Code, w.Header().Get("WWW-Authenticate"), w.Header().Get("ngrok-error-code"))
		}
	}
	if _, err := NewBasicAuth(nil); err == nil {
		t.Errorf("no credentials accepted")
	}
	if _, err := NewBasicAuth([]BasicCredential{{Username: "x"}}); err == nil {
		t.Errorf("a credential without a password accepted")
	}
}
