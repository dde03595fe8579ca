package trafficpolicy

import (
	"strings"
	"testing"
)

// TestSignInActionConfig: oauth's and openid-connect's configurations are refused as ngrok
// refuses them, naming the field; the documented fields are accepted.
func TestSignInActionConfig(t *testing.T) {
	req := func(typ, cfg string) string {
		return `{"on_http_request":[{"actions":[{"type":"` + typ + `","config":` + cfg + `}]}]}`
	}
	const at = "on_http_request[0].actions[0].config."
	for _, c := range []struct{ doc, want string }{
		{req("oauth", `{}`), at + "provider: is required"},
		{req("oauth", `{"provider":"myspace"}`), at + "provider: \"myspace\" is not a supported OAuth provider"},
		{req("oauth", `{"provider":"google","client_secret":"s"}`), at + "client_secret: give client_id and client_secret together"},
		{req("oauth", `{"provider":"google","scopes":["x"]}`), at + "scopes: scopes can be asked for only with your own application"},
		{req("oauth", `{"provider":"google","auth_id":"a b"}`), at + "auth_id: must be at most 64 letters"},
		{req("oauth", `{"provider":"google","authz_url_params":{"state":"x"}}`), at + "authz_url_params: \"state\" is set by the sign-in itself"},
		{req("oauth", `{"provider":"google","idle_session_timeout":"0s"}`), at + "idle_session_timeout: \"0s\" must be from 1s"},
		{req("oauth", `{"provider":"google","cookie_prefix":"x"}`), `unknown field "cookie_prefix"`},
		{req("openid-connect", `{}`), at + "issuer_url: is required"},
		{req("openid-connect", `{"issuer_url":"http://idp.example","client_id":"c","client_secret":"s"}`), at + "issuer_url: \"http://idp.example\" is not an https URL"},
		{req("openid-connect", `{"issuer_url":"https://idp.example","client_secret":"s"}`), at + "client_id: is required"},
		{req("openid-connect", `{"issuer_url":"https://idp.example","client_id":"c"}`), at + "client_secret: is required"},
		{req("openid-connect", `{"issuer_url":"https://idp.example","client_id":"c","client_secret":"s","idle_session_timeout":"1h","idle_session_duration":"1h"}`), at + "idle_session_duration: give idle_session_timeout or"},
		{req("openid-connect", `{"issuer_url":"https://idp.example","client_id":"c","client_secret":"s","scopes":["a b"]}`), at + "scopes[0]: \"a b\" is not a scope"},
		{`{"on_http_response":[{"actions":[{"type":"oauth","config":{"provider":"google"}}]}]}`, "cannot be used in on_http_response"},
	} {
		if _, err := Parse(c.doc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n  %v\n  want %q", c.doc, err, c.want)
		}
	}
	for _, ok := range []string{
		req("oauth", `{"provider":"google"}`),
		req("oauth", `{"provider":"GitHub","auth_id":"gh-1","client_id":"c","client_secret":"s","scopes":["repo"],"authz_url_params":{"prompt":"consent"},"max_session_duration":"24h","idle_session_timeout":"30m","userinfo_refresh_interval":"10m","allow_cors_preflight":true}`),
		req("openid-connect", `{"issuer_url":"https://idp.example/realms/x","client_id":"c","client_secret":"s","idle_session_duration":"2h"}`),
	} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
