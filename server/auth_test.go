package server_test

import (
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	h := func(auth, version string) map[string]string {
		return map[string]string{"Authorization": auth, "Ngrok-Version": version}
	}
	keyID := e.do(e.admin.token, "GET", "/api_keys", nil).must(t, 200).items(t, "keys")[0]["id"].(string)
	selector, _, _ := strings.Cut(e.admin.token, "_")
	policy := e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201).str("id")
	cases := []struct {
		name    string
		headers map[string]string
		status  int
		code    int
	}{
		{"missing", h("", "2"), 401, ep.CodeAuthMissing},
		{"basic scheme", h("Basic dXNlcjpwYXNz", "2"), 401, ep.CodeAuthMalformed},
		{"bearer without token", h("Bearer ", "2"), 401, ep.CodeAuthMalformed},
		{"garbage token", h("Bearer not-a-token", "2"), 401, ep.CodeAuthMalformed},
		{"api key id instead of token", h("Bearer "+keyID, "2"), 401, ep.CodeAuthKeyID},
		{"wrong secret", h("Bearer "+selector+"_"+strings.Repeat("A", 52), "2"), 401, ep.CodeAuthUnknown},
		{"unknown selector", h("Bearer 2Q6oQ3nSLvNn1rBRaagSXSQKvhW_"+strings.Repeat("B", 52), "2"), 401, ep.CodeAuthUnknown},
		{"version missing", h("Bearer "+e.admin.token, ""), 400, ep.CodeNoVersion},
		{"version 1", h("Bearer "+e.admin.token, "1"), 400, ep.CodeBadVersion},
		{"version garbage", h("Bearer "+e.admin.token, "two"), 400, ep.CodeBadVersion},
	}
	// A list authenticates before its query; a GET by id authenticates in the same query as its
	// read (authPaths): both give the same answers, and an authentication error comes before
	// whether the object exists.
	for _, path := range authPaths(policy) {
		for _, c := range cases {
			t.Run(c.name+" "+path, func(t *testing.T) {
				r := e.doHeaders(c.headers, "GET", path, nil).wantError(t, c.status, c.code)
				if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without WWW-Authenticate")
				}
			})
		}
	}
	// The spec's neutral header name and a lowercase scheme are accepted.
	e.doHeaders(map[string]string{"Authorization": "bearer " + e.admin.token, "Service-Version": "2"}, "GET", "/ip_policies", nil).must(t, 200)
	// Every authenticated endpoint checks: a POST without a key changes nothing.
	e.doHeaders(h("", "2"), "POST", "/ip_policies", map[string]any{}).wantError(t, 401, ep.CodeAuthMissing)
	if n := len(e.do(e.admin.token, "GET", "/ip_policies", nil).must(t, 200).items(t, "ip_policies")); n != 1 {
		t.Fatalf("unauthenticated POST created %d policies", n-1)
	}
}

// TestAPIKeyTokenOnce: the token is in the create response only, works at once, and stops
// working on the next request after the key is deleted.
func TestAPIKeyTokenOnce(t *testing.T) {
	e := newEnv(t)
	created := e.do(e.admin.token, "POST", "/api_keys", map[string]any{"description": "ci"}).must(t, 201)
	token := created.str("token")
	if token == "" {
		t.Fatal("no token in create response")
	}
	if created.str("owner_id") != e.admin.caller.Principal.ID {
		t.Fatalf("owner_id %s, want the caller %s", created.str("owner_id"), e.admin.caller.Principal.ID)
	}
	id := created.str("id")
	e.do(token, "GET", "/ip_policies", nil).must(t, 200)
	for _, r := range []resp{
		e.do(token, "GET", "/api_keys/"+id, nil).must(t, 200),
		e.do(token, "PATCH", "/api_keys/"+id, map[string]any{"metadata": "x"}).must(t, 200),
	} {
		if v, ok := r.body["token"]; !ok || v != nil {
			t.Fatalf("token must be present and null after creation: %s", r.raw)
		}
	}
	for _, k := range e.do(token, "GET", "/api_keys", nil).must(t, 200).items(t, "keys") {
		if v, ok := k["token"]; !ok || v != nil {
			t.Fatalf("token must be null in lists: %v", k)
		}
	}
	policy := e.do(e.admin.token, "POST", "/ip_policies", nil).must(t, 201).str("id")
	e.do(e.admin.token, "DELETE", "/api_keys/"+id, nil).must(t, 204)
	for _, path := range authPaths(policy) {
		e.do(token, "GET", path, nil).wantError(t, 401, ep.CodeAuthUnknown)
	}
	// A key can delete itself; its next request fails.
	self := e.do(e.admin.token, "POST", "/api_keys", nil).must(t, 201)
	e.do(self.str("token"), "DELETE", "/api_keys/"+self.str("id"), nil).must(t, 204)
	e.do(self.str("token"), "GET", "/api_keys", nil).wantError(t, 401, ep.CodeAuthUnknown)
}

// TestCredentialTokenIsNotAnAPIKey: an agent authtoken never authenticates this API.
func TestCredentialTokenIsNotAnAPIKey(t *testing.T) {
	e := newEnv(t)
	cr := e.do(e.admin.token, "POST", "/credentials", nil).must(t, 201)
	token := cr.str("token")
	if token == "" {
		t.Fatal("no token in credential create response")
	}
	if acl, ok := cr.body["acl"].([]any); !ok || len(acl) != 0 {
		t.Fatalf("acl of a credential created without one should be []: %s", cr.raw)
	}
	e.do(token, "GET", "/ip_policies", nil).wantError(t, 401, ep.CodeAuthUnknown)
	got := e.do(e.admin.token, "GET", "/credentials/"+cr.str("id"), nil).must(t, 200)
	if v, ok := got.body["token"]; !ok || v != nil {
		t.Fatalf("credential token shown again: %s", got.raw)
	}
}

// TestOwners: owner_id defaults to the caller; only an admin may name another principal of the
// same account, only at creation.
func TestOwners(t *testing.T) {
	e := newEnv(t)
	admin := e.admin
	bot := e.do(admin.token, "POST", "/bot_users", map[string]any{"name": "ci"}).must(t, 201)
	botID := bot.str("id")
	if !ep.ValidID("bot", botID) || bot.body["active"] != true {
		t.Fatalf("bot user: %s", bot.raw)
	}
	for _, path := range []string{"/api_keys", "/credentials"} {
		t.Run(path, func(t *testing.T) {
			owned := e.do(admin.token, "POST", path, map[string]any{"owner_id": botID}).must(t, 201)
			if owned.str("owner_id") != botID {
				t.Fatalf("owner_id %s, want %s", owned.str("owner_id"), botID)
			}
			e.do(admin.token, "POST", path, map[string]any{"owner_id": "usr_2Q6oQ3nSLvNn1rBRaagSXSQKvhW"}).wantError(t, 400, ep.CodeInvalid)
			otherAcct := e.newAccount("other" + path)
			r := e.do(admin.token, "POST", path, map[string]any{"owner_id": otherAcct.caller.Principal.ID}).wantError(t, 400, ep.CodeInvalid)
			if !strings.HasPrefix(r.msg(), "owner_id") {
				t.Fatalf("message should name owner_id: %s", r.msg())
			}
			e.do(admin.token, "PATCH", path+"/"+owned.str("id"), map[string]any{"owner_id": admin.caller.Principal.ID}).wantError(t, 400, ep.CodeUnknownField)

			member := e.member(admin)
			e.do(member.token, "POST", path, map[string]any{"owner_id": botID}).wantError(t, 403, ep.CodeOwnerForbidden)
			if got := e.do(member.token, "POST", path, map[string]any{"owner_id": member.caller.Principal.ID}).must(t, 201); got.str("owner_id") != member.caller.Principal.ID {
				t.Fatalf("member naming itself: %s", got.raw)
			}
			if got := e.do(member.token, "POST", path, nil).must(t, 201); got.str("owner_id") != member.caller.Principal.ID {
				t.Fatalf("default owner of a member's %s: %s", path, got.raw)
			}
		})
	}
	// A bot-owned key is not an admin either.
	botKey := e.do(admin.token, "POST", "/api_keys", map[string]any{"owner_id": botID}).must(t, 201).str("token")
	e.do(botKey, "POST", "/credentials", map[string]any{"owner_id": admin.caller.Principal.ID}).wantError(t, 403, ep.CodeOwnerForbidden)
	if got := e.do(botKey, "POST", "/credentials", nil).must(t, 201); got.str("owner_id") != botID {
		t.Fatalf("default owner for a bot's key: %s", got.raw)
	}
}

// TestBotUserLifecycleAndKeys: an inactive bot's keys stop working until it is active again;
// deleting a bot deletes its keys and credentials.
func TestBotUserLifecycleAndKeys(t *testing.T) {
	e := newEnv(t)
	botID := e.do(e.admin.token, "POST", "/bot_users", map[string]any{"name": "ci", "active": false}).must(t, 201).str("id")
	key := e.do(e.admin.token, "POST", "/api_keys", map[string]any{"owner_id": botID}).must(t, 201)
	cred := e.do(e.admin.token, "POST", "/credentials", map[string]any{"owner_id": botID}).must(t, 201)
	for _, path := range authPaths(key.str("id")) {
		path = strings.Replace(path, "/ip_policies", "/api_keys", 1)
		e.do(key.str("token"), "GET", path, nil).wantError(t, 401, ep.CodeAuthInactive)
	}
	e.do(e.admin.token, "PATCH", "/bot_users/"+botID, map[string]any{"active": true}).must(t, 200)
	e.do(key.str("token"), "GET", "/api_keys", nil).must(t, 200)
	e.do(key.str("token"), "GET", "/api_keys/"+key.str("id"), nil).must(t, 200)
	e.do(e.admin.token, "PATCH", "/bot_users/"+botID, map[string]any{"name": "renamed", "active": nil}).must(t, 200)
	e.do(key.str("token"), "GET", "/api_keys", nil).must(t, 200)

	e.do(e.admin.token, "POST", "/bot_users", map[string]any{}).wantError(t, 400, ep.CodeInvalid)
	e.do(e.admin.token, "POST", "/bot_users", map[string]any{"name": "  "}).wantError(t, 400, ep.CodeInvalid)
	e.do(e.admin.token, "PATCH", "/bot_users/"+botID, map[string]any{"name": ""}).wantError(t, 400, ep.CodeInvalid)

	e.do(e.admin.token, "DELETE", "/bot_users/"+botID, nil).must(t, 204)
	e.do(key.str("token"), "GET", "/api_keys", nil).wantError(t, 401, ep.CodeAuthUnknown)
	e.do(key.str("token"), "GET", "/api_keys/"+key.str("id"), nil).wantError(t, 401, ep.CodeAuthUnknown)
	e.do(e.admin.token, "GET", "/api_keys/"+key.str("id"), nil).wantError(t, 404, ep.CodeNotFound)
	e.do(e.admin.token, "GET", "/credentials/"+cred.str("id"), nil).wantError(t, 404, ep.CodeNotFound)
	// Keys of the admin are untouched.
	e.do(e.admin.token, "GET", "/api_keys", nil).must(t, 200)
}

// authPaths are GETs under /ip_policies that authenticate in each of the ways the server does: a
// list (before its query), and GETs by id (in the same query as the read) of an existing object,
// of a missing one, and of an id no object can have.
func authPaths(existing string) []string {
	return []string{"/ip_policies", "/ip_policies/" + existing, "/ip_policies/ipp_2Q6oQ3nSLvNn1rBRaagSXSQKvhW", "/ip_policies/%FF%00"}
}
