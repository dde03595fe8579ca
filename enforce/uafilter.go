package enforce

import (
	"fmt"
	"net/http"
	"regexp"
)

// UserAgentFilter is the user_agent_filter module (and an agent bind's UserAgentFilter option):
// Go (RE2) regular expressions matched, unanchored, against the request's first User-Agent
// header. The decision, in the order ngrok documents it:
//
//  1. a filter with no rules admits every request;
//  2. a User-Agent matching any allow rule is admitted (an allow rule overrides the deny rules,
//     so a specific allow can carve an exception out of a broad deny);
//  3. a request without a User-Agent header (or with an empty one) is refused, unless an allow
//     rule matched the empty string in step 2 (say "^$");
//  4. a User-Agent matching any deny rule is refused;
//  5. otherwise the request is refused when there is at least one allow rule, and admitted
//     when there is none.
//
// A refusal is 403 with ERR_NGROK_3211. Matching cannot fail or panic once the stage is built:
// RE2 runs in time linear in the input.
type UserAgentFilter struct {
	allow, deny []*regexp.Regexp
}

// NewUserAgentFilter compiles the rules; an error names the first that does not compile.
func NewUserAgentFilter(allow, deny []string) (*UserAgentFilter, error) {
	f := &UserAgentFilter{}
	for _, spec := range []struct {
		list []string
		into *[]*regexp.Regexp
		name string
	}{{allow, &f.allow, "allow"}, {deny, &f.deny, "deny"}} {
		for i, s := range spec.list {
			re, err := regexp.Compile(s)
			if err != nil {
				return nil, fmt.Errorf("%s[%d] %q is not a valid regular expression: %v", spec.name, i, s, err)
			}
			*spec.into = append(*spec.into, re)
		}
	}
	return f, nil
}

// Name is the module's name.
func (f *UserAgentFilter) Name() string { return "user_agent_filter" }

// Admits applies the rules to a request's User-Agent values (only the first counts).
func (f *UserAgentFilter) Admits(userAgents []string) bool {
	if len(f.allow) == 0 && len(f.deny) == 0 {
		return true
	}
	ua := ""
	if len(userAgents) > 0 {
		ua = userAgents[0]
	}
	for _, re := range f.allow {
		if re.MatchString(ua) {
			return true
		}
	}
	if ua == "" {
		return false
	}
	for _, re := range f.deny {
		if re.MatchString(ua) {
			return false
		}
	}
	return len(f.allow) == 0
}

// Wrap refuses requests the rules do not admit.
func (f *UserAgentFilter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.Admits(r.Header.Values("User-Agent")) {
			ErrorPage(w, r, http.StatusForbidden, 3211, "The server does not authorize requests from your user-agent.")
			return
		}
		next.ServeHTTP(w, r)
	})
}
