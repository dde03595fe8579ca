package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/plan"
)

// The sign-in modules' operator settings: the managed OAuth applications (--oauth-app), the
// overrides of the OAuth providers' endpoints (--oauth-endpoints), and the limits on agents'
// sign-in bind options' sessions (--bind-sign-in-*).

// listFlag is a repeatable flag whose values start from an environment variable's list: given
// on the command line, the flags replace the variable's entries.
type listFlag struct {
	values []string
	given  bool
}

func (l *listFlag) String() string { return strings.Join(l.values, " ") }

func (l *listFlag) Set(v string) error {
	if !l.given {
		l.values, l.given = nil, true
	}
	l.values = append(l.values, v)
	return nil
}

// newListFlag defines a repeatable flag starting from the entries of envName split on sep.
func newListFlag(fs *flag.FlagSet, name, envName, sep, usage string) *listFlag {
	l := &listFlag{}
	for v := range strings.SplitSeq(os.Getenv(envName), sep) {
		if v = strings.TrimSpace(v); v != "" {
			l.values = append(l.values, v)
		}
	}
	fs.Var(l, name, usage)
	return l
}

// parseOAuthApps reads PROVIDER=CLIENT_ID:CLIENT_SECRET entries (the secret is everything after
// the first colon), one per provider.
func parseOAuthApps(entries []string) (map[string]enforce.OAuthApp, error) {
	out := map[string]enforce.OAuthApp{}
	for _, e := range entries {
		prov, cred, ok := strings.Cut(e, "=")
		id, secret, ok2 := strings.Cut(cred, ":")
		prov = strings.ToLower(strings.TrimSpace(prov))
		if !ok || !ok2 || id == "" || secret == "" {
			return nil, fmt.Errorf("--oauth-app %q: want PROVIDER=CLIENT_ID:CLIENT_SECRET", redactSecret(e))
		}
		if !enforce.OAuthProvider(prov) {
			return nil, fmt.Errorf("--oauth-app: unknown provider %q (github, gitlab, google, microsoft, linkedin, twitch, facebook, amazon)", prov)
		}
		if _, dup := out[prov]; dup {
			return nil, fmt.Errorf("--oauth-app: %s is given twice", prov)
		}
		out[prov] = enforce.OAuthApp{ClientID: id, ClientSecret: secret}
	}
	return out, nil
}

// redactSecret hides what follows the first colon of an --oauth-app value in messages.
func redactSecret(e string) string {
	if i := strings.IndexByte(e, ':'); i >= 0 {
		return e[:i+1] + "…"
	}
	return e
}

// parseOAuthEndpoints reads PROVIDER=AUTHORIZE_URL,TOKEN_URL,USERINFO_URL entries, all https.
func parseOAuthEndpoints(entries []string) (map[string]enforce.OAuthEndpoints, error) {
	out := map[string]enforce.OAuthEndpoints{}
	for _, e := range entries {
		prov, urls, ok := strings.Cut(e, "=")
		prov = strings.ToLower(strings.TrimSpace(prov))
		parts := strings.Split(urls, ",")
		if !ok || len(parts) != 3 {
			return nil, fmt.Errorf("--oauth-endpoints %q: want PROVIDER=AUTHORIZE_URL,TOKEN_URL,USERINFO_URL", e)
		}
		if !enforce.OAuthProvider(prov) {
			return nil, fmt.Errorf("--oauth-endpoints: unknown provider %q", prov)
		}
		ep := enforce.OAuthEndpoints{AuthURL: strings.TrimSpace(parts[0]), TokenURL: strings.TrimSpace(parts[1]), UserInfoURL: strings.TrimSpace(parts[2])}
		if err := enforce.CheckOAuthEndpoints(ep); err != nil {
			return nil, fmt.Errorf("--oauth-endpoints %s: %v", prov, err)
		}
		out[prov] = ep
	}
	return out, nil
}

// bindSignInFlags are the operator's limits on the sign-in sessions of agents' oauth and oidc
// bind options. ngrok's bind options carry no session duration, inactivity timeout or re-check
// interval (an edge module and a traffic policy action do), so without these flags such a
// session would last as long as its cookie's browser kept it.
type bindSignInFlags struct {
	maxDuration, idleTimeout, checkInterval *string
}

func addBindSignInFlags(fs *flag.FlagSet) *bindSignInFlags {
	return &bindSignInFlags{
		maxDuration: fs.String("bind-sign-in-max-duration", env("EDGEPLANE_BIND_SIGN_IN_MAX_DURATION", "0"),
			"longest a sign-in session of an agent's oauth or oidc bind option lasts, active or not; 0 for no limit (env EDGEPLANE_BIND_SIGN_IN_MAX_DURATION)"),
		idleTimeout: fs.String("bind-sign-in-idle-timeout", env("EDGEPLANE_BIND_SIGN_IN_IDLE_TIMEOUT", "0"),
			"a sign-in session of an agent's oauth or oidc bind option unused this long ends; 0 for no limit (env EDGEPLANE_BIND_SIGN_IN_IDLE_TIMEOUT)"),
		checkInterval: fs.String("bind-sign-in-check-interval", env("EDGEPLANE_BIND_SIGN_IN_CHECK_INTERVAL", "0"),
			"a sign-in session of an agent's oauth or oidc bind option is checked with the provider again this often; 0 never (env EDGEPLANE_BIND_SIGN_IN_CHECK_INTERVAL)"),
	}
}

// limits parses the flags. Each is 0 or a whole number of seconds from 1s to 8760h, the range a
// traffic policy's sign-in durations take: sessions keep their times in seconds.
func (f *bindSignInFlags) limits() (plan.BindSignInLimits, error) {
	var l plan.BindSignInLimits
	for _, c := range []struct {
		name, v string
		to      *time.Duration
	}{
		{"bind-sign-in-max-duration", *f.maxDuration, &l.MaxDuration},
		{"bind-sign-in-idle-timeout", *f.idleTimeout, &l.IdleTimeout},
		{"bind-sign-in-check-interval", *f.checkInterval, &l.CheckInterval},
	} {
		d, err := time.ParseDuration(c.v)
		if err != nil || (d != 0 && (d < time.Second || d > 8760*time.Hour || d%time.Second != 0)) {
			return l, fmt.Errorf("--%s must be 0 or a whole number of seconds from 1s to 8760h, like 12h, got %q", c.name, c.v)
		}
		*c.to = d
	}
	return l, nil
}
