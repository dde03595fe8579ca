package main

import (
	"flag"
	"strings"
	"testing"
	"time"
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

// TestBindSignInFlags: the --bind-sign-in-* limits read their environment variables, take 0 or
// whole seconds from 1s to 8760h, and refuse anything else naming the flag.
func TestBindSignInFlags(t *testing.T) {
	t.Setenv("EDGEPLANE_BIND_SIGN_IN_IDLE_TIMEOUT", "30m")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := addBindSignInFlags(fs)
	if err := fs.Parse([]string{"--bind-sign-in-max-duration", "12h"}); err != nil {
		t.Fatal(err)
	}
	l, err := f.limits()
	if err != nil || l.MaxDuration != 12*time.Hour || l.IdleTimeout != 30*time.Minute || l.CheckInterval != 0 {
		t.Fatalf("limits %+v, %v", l, err)
	}
	for _, c := range []struct{ flag, value string }{
		{"bind-sign-in-max-duration", "-1s"},
		{"bind-sign-in-idle-timeout", "500ms"},
		{"bind-sign-in-check-interval", "1.5s"},
		{"bind-sign-in-max-duration", "8761h"},
		{"bind-sign-in-idle-timeout", "soon"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f := addBindSignInFlags(fs)
		if err := fs.Parse([]string{"--" + c.flag, c.value}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.limits(); err == nil || !strings.Contains(err.Error(), "--"+c.flag) {
			t.Errorf("--%s %s: %v, want a refusal naming the flag", c.flag, c.value, err)
		}
	}
}
