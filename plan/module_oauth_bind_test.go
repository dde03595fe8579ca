package plan

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// TestOAuthBindOption: the oauth bind option builds the sign-in stage with the agent's own
// application or the operator's managed one, and is refused with the right code and a reason
// when it cannot work: no session key yet, no managed application for the provider (3208,
// naming --oauth-app), a sealed secret only (3208, naming the field), an unknown provider
// (365), half a client (389), scopes with the managed application (390), or JSON that is not an
// object (301).
func TestOAuthBindOption(t *testing.T) {
	var env BindEnv
	build := func(raw json.RawMessage) (enforce.Stage, error) { return bindOAuth(raw, env) }
	own := json.RawMessage(`{"provider":"github","client_id":"c","client_secret":"s","allow_emails":["a@example.com"],"allow_domains":["example.com"],"scopes":["repo"]}`)
	env = BindEnv{}
	if _, err := build(own); err == nil || !strings.Contains(err.Error(), "session key") || RefusalCode(err) != ep.AgentCodeBadBind {
		t.Fatalf("without the environment: %v", err)
	}
	endpoints := map[string]enforce.OAuthEndpoints{"github": {AuthURL: "https://ghe.example/login/oauth/authorize",
		TokenURL: "https://ghe.example/login/oauth/access_token", UserInfoURL: "https://ghe.example/api/v3/user"}}
	env = BindEnv{Env: &Env{SessionKey: make([]byte, 32), Outbound: http.DefaultClient, OAuthEndpoints: endpoints}}

	if st, err := build(own); err != nil || st.Name() != "oauth" {
		t.Fatalf("own application: %v", err)
	}
	managed := json.RawMessage(`{"provider":"GitHub","allow_domains":["example.com"]}`)
	_, err := build(managed)
	if err == nil || RefusalCode(err) != ep.AgentCodeUnsupportedOpt || !strings.Contains(err.Error(), "--oauth-app github=") {
		t.Fatalf("no managed application: %v (code %d)", err, RefusalCode(err))
	}
	env = BindEnv{Env: &Env{SessionKey: make([]byte, 32), Outbound: http.DefaultClient, OAuthEndpoints: endpoints,
		OAuthApps: map[string]enforce.OAuthApp{"github": {ClientID: "m", ClientSecret: "ms"}}}}
	if st, err := build(managed); err != nil || st.Name() != "oauth" {
		t.Fatalf("managed application: %v", err)
	}
	// The managed application of another provider does not serve this one.
	if _, err := build(json.RawMessage(`{"provider":"gitlab"}`)); err == nil || !strings.Contains(err.Error(), "--oauth-app gitlab=") {
		t.Fatalf("gitlab without its managed application: %v", err)
	}
	// An override that is not https is refused by the stage (the flag's parser refuses it first).
	env = BindEnv{Env: &Env{SessionKey: make([]byte, 32), Outbound: http.DefaultClient,
		OAuthEndpoints: map[string]enforce.OAuthEndpoints{"github": {AuthURL: "http://a", TokenURL: "http://t", UserInfoURL: "http://u"}}}}
	if _, err := build(own); err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("endpoints not https: %v", err)
	}

	for raw, want := range map[string]struct {
		code int
		text string
	}{
		`{"provider":"github","client_id":"c","sealed_client_secret":"AAEC"}`: {ep.AgentCodeUnsupportedOpt, "sealed_client_secret"},
		`{"provider":"github","sealed_client_secret":"AAEC"}`:                 {ep.AgentCodeUnsupportedOpt, "sealed_client_secret"},
		`{"provider":"myspace"}`:                    {codeOAuthProvider, `"myspace" is not supported`},
		`{"provider":""}`:                           {ep.AgentCodeBadBind, "no provider"},
		`{"provider":"github","client_id":"c"}`:     {codeOAuthHalfClient, "both client_id and client_secret"},
		`{"provider":"github","client_secret":"s"}`: {codeOAuthHalfClient, "both client_id and client_secret"},
		`{"provider":"github","scopes":["repo"]}`:   {codeOAuthScopesOwned, "own OAuth application"},
		`[1]`: {ep.AgentCodeBadBind, "JSON object"},
	} {
		_, err := build(json.RawMessage(raw))
		if err == nil || RefusalCode(err) != want.code || !strings.Contains(err.Error(), want.text) {
			t.Errorf("%s: %v (code %d), want %d %q", raw, err, RefusalCode(err), want.code, want.text)
		}
	}
}
