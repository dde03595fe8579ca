package main

import (
	"flag"
	"strings"
	"testing"
)

// TestOAuthFlags: --oauth-app and --oauth-endpoints parse, replace their environment variables'
// lists when given, and refuse malformed values without echoing the secret.
func TestOAuthFlags(t *testing.T) {
	t.Setenv("EDGEPLANE_OAUTH_APPS", "github=gid:gsec, google=goo:se:cret")
	t.Setenv("EDGEPLANE_OAUTH_ENDPOINTS", "github=https://ghe.test/login/oauth/authorize,https://ghe.test/login/oauth/access_token,https://ghe.test/api/v3/user")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	apps := newListFlag(fs, "oauth-app", "EDGEPLANE_OAUTH_APPS", ",", "")
	eps := newListFlag(fs, "oauth-endpoints", "EDGEPLANE_OAUTH_ENDPOINTS", ";", "")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	a, err := parseOAuthApps(apps.values)
	if err != nil || a["github"].ClientSecret != "gsec" || a["google"].ClientID != "goo" || a["google"].ClientSecret != "se:cret" {
		t.Fatalf("apps from env: %+v %v", a, err)
	}
	e, err := parseOAuthEndpoints(eps.values)
	if err != nil || e["github"].UserInfoURL != "https://ghe.test/api/v3/user" {
		t.Fatalf("endpoints from env: %+v %v", e, err)
	}
	if err := fs.Parse([]string{"--oauth-app", "gitlab=l:s"}); err != nil {
		t.Fatal(err)
	}
	if a, _ := parseOAuthApps(apps.values); len(a) != 1 || a["gitlab"].ClientID != "l" {
		t.Fatalf("flags replace the env: %+v", a)
	}
	for _, bad := range [][]string{{"github=id"}, {"myspace=a:b"}, {"github=a:b", "github=c:d"}, {"github=:secret-value"}} {
		_, err := parseOAuthApps(bad)
		if err == nil || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	for _, bad := range [][]string{{"github=https://a/x,https://a/y"}, {"github=http://a/x,https://a/y,https://a/z"}, {"nope=https://a/x,https://a/y,https://a/z"}} {
		if _, err := parseOAuthEndpoints(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
