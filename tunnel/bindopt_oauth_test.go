package tunnel

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
	build := bindStages["oauth"]
	own := json.RawMessage(`{"provider":"github","client_id":"c","client_secret":"s","allow_emails":["a@example.com"],"allow_domains":["example.com"],"scopes":["repo"]}`)
	signInEnv.Store(nil)
	if _, err := build(own); err == nil || !strings.Contains(err.Error(), "session key") || refusalCode(err) != ep.AgentCodeBadBind {
		t.Fatalf("without the environment: %v", err)
	}
	t.Cleanup(func() { signInEnv.Store(nil) })
	endpoints := map[string]enforce.OAuthEndpoints{"github": {AuthURL: "https://ghe.example/login/oauth/authorize",
		TokenURL: "https://ghe.example/login/oauth/access_token", UserInfoURL: "https://ghe.example/api/v3/user"}}
	SetSignInEnv(SignInEnv{SessionKey: make([]byte, 32), Outbound: http.DefaultClient, OAuthEndpoints: endpoints})

	if st, err := build(own); err != nil || st.Name() != "oauth" {
		t.Fatalf("own application: %v", err)
	}
	managed := json.RawMessage(`{"provider":"GitHub","allow_domains":["example.com"]}`)
	_, err := build(managed)
	if err == nil || refusalCode(err) != ep.AgentCodeUnsupportedOpt || !strings.Contains(err.Error(), "--oauth-app github=") {
		t.Fatalf("no managed application: %v (code %d)", err, refusalCode(err))
	}
	SetSignInEnv(SignInEnv{SessionKey: make([]byte, 32), Outbound: http.DefaultClient, OAuthEndpoints: endpoints,
		OAuthApps: map[string]enforce.OAuthApp{"github": {ClientID: "m", ClientSecret: "ms"}}})
	if st, err := build(managed); err != nil || st.Name() != "oauth" {
		t.Fatalf("managed application: %v", err)
	}
	// The managed application of another provider does not serve this one.
	if _, err := build(json.RawMessage(`{"provider":"gitlab"}`)); err == nil || !strings.Contains(err.Error(), "--oauth-app gitlab=") {
		t.Fatalf("gitlab without its managed application: %v", err)
	}
	// An override that is not https is refused by the stage (the flag's parser refuses it first).
	SetSignInEnv(SignInEnv{SessionKey: make([]byte, 32), Outbound: http.DefaultClient,
		OAuthEndpoints: map[string]enforce.OAuthEndpoints{"github": {AuthURL: "http://a", TokenURL: "http://t", UserInfoURL: "http://u"}}})
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
		if err == nil || refusalCode(err) != want.code || !strings.Contains(err.Error(), want.text) {
			t.Errorf("%s: %v (code %d), want %d %q", raw, err, refusalCode(err), want.code, want.text)
		}
	}
}

// TestOAuthBindRefusalCode: chain refuses the bind with the builder's own code, naming the
// module, and an http bind with a working option gets the oauth stage.
func TestOAuthBindRefusalCode(t *testing.T) {
	t.Cleanup(func() { signInEnv.Store(nil) })
	SetSignInEnv(SignInEnv{SessionKey: make([]byte, 32), Outbound: http.DefaultClient})
	var o bindOpts
	_, _, be := o.chain("https", json.RawMessage(`{"OAuth":{"provider":"github"}}`))
	if be == nil || be.code != ep.AgentCodeUnsupportedOpt || !strings.HasPrefix(be.msg, "oauth: ") || !strings.Contains(be.msg, "--oauth-app") {
		t.Fatalf("no managed application: %+v", be)
	}
	c, _, be := o.chain("https", json.RawMessage(`{"OAuth":{"provider":"github","client_id":"c","client_secret":"s"}}`))
	if be != nil || c == nil || len(c.HTTP) != 1 || c.HTTP[0].Name() != "oauth" {
		t.Fatalf("own application: %+v %+v", c, be)
	}
	if _, _, be := o.chain("tcp", json.RawMessage(`{"OAuth":{"provider":"github","client_id":"c","client_secret":"s"}}`)); be == nil || be.code != ep.AgentCodeBadBind {
		t.Fatalf("oauth on a tcp bind: %+v", be)
	}
}
