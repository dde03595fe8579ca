package enforce

import (
	"net/http"
	"testing"
)

// Header names fold as an upstream reads them (any case, '_' for '-'), and StripClientHeaders
// removes every spelling of the identity headers and the underscored X-Forwarded-* ones, and
// nothing else: the canonical X-Forwarded-* stay for the proxy to append to or replace, and a
// name that only starts alike (Ngrok-Authx) is not one of ours.
func TestStripClientHeaders(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		want         bool
	}{
		{"ngrok_auth_user_email", "ngrok-auth-", true},
		{"Ngrok-Auth_User-Email", "ngrok-auth-", true},
		{"NGROK-AUTH-", "ngrok-auth-", true},
		{"Ngrok-Authx", "ngrok-auth-", false},
		{"Ngrok-Auth", "ngrok-auth-", false},
		{"ngrok.auth.user", "ngrok-auth-", false},
	} {
		if got := HeaderNameHasPrefix(c.name, c.prefix); got != c.want {
			t.Errorf("HeaderNameHasPrefix(%q, %q) = %v", c.name, c.prefix, got)
		}
	}
	if !HeaderNameFolds("X_Forwarded_Proto", "x-forwarded-proto") || HeaderNameFolds("X-Forwarded-Protocol", "x-forwarded-proto") {
		t.Error("HeaderNameFolds compares whole names")
	}
	h := http.Header{"Ngrok_auth_user_email": {"m"}, "Ngrok-Auth_user-Email": {"m"}, "Ngrok-Auth-User-Id": {"1"},
		"NGROK_MTLS_SUBJECT_CN": {"admin"}, "X_forwarded_proto": {"https"}, "X_forwarded_for": {"10.0.0.1"},
		"x_forwarded_host": {"evil"}, "X-Forwarded-Proto": {"https"}, "X-Forwarded-For": {"10.0.0.2"},
		"X-Forwarded-Host": {"evil"}, "Ngrok-Authx": {"kept"}, "Other_header": {"kept"}}
	StripClientHeaders(h)
	want := http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-For": {"10.0.0.2"}, "X-Forwarded-Host": {"evil"},
		"Ngrok-Authx": {"kept"}, "Other_header": {"kept"}}
	if len(h) != len(want) {
		t.Fatalf("left %v, want %v", h, want)
	}
	for k, v := range want {
		if len(h[k]) != 1 || h[k][0] != v[0] {
			t.Fatalf("%s: %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
}
