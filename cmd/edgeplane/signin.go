package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/edgeplane/edgeplane/enforce"
)

// The sign-in modules' operator settings: the managed OAuth applications (--oauth-app) and the
// overrides of the OAuth providers' endpoints (--oauth-endpoints).

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
