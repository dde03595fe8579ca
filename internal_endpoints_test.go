package edgeplane

import "testing"

// TestInternalEndpointKey: an internal endpoint's name is scoped to its account (two accounts'
// ids differing only in case stay apart), can never be a public Host, and splits back.
func TestInternalEndpointKey(t *testing.T) {
	a, b := InternalEndpointKey("ac_Abc", "API.internal.", 443), InternalEndpointKey("ac_abc", "api.internal", 443)
	if a == b {
		t.Errorf("two accounts share the name %q", a)
	}
	if ValidHostname(a, false) {
		t.Errorf("%q is a valid hostname", a)
	}
	if host, port, ok := SplitInternalEndpointKey(a); !ok || host != "api.internal" || port != 443 {
		t.Errorf("split %q: %q %d %v", a, host, port, ok)
	}
	for _, s := range []string{"api.internal", "api.example.com@443@00", "x@y@z"} {
		if _, _, ok := SplitInternalEndpointKey(s); ok {
			t.Errorf("split %q: ok", s)
		}
	}
	if IsInternalHost(".internal") || !IsInternalHost("a.INTERNAL") || IsInternalHost("internal.example.com") {
		t.Error("IsInternalHost")
	}
}
