package enforce

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The actions of on_http_request that change the request or answer it from the document alone:
// deny, custom-response, add-headers, remove-headers, redirect, url-rewrite and restrict-ips.
// The actions with state or stages of their own are in trafficpolicy_<action>.go.
func init() {
	registerRequestAction("deny", func(_ *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (requestFunc, error) {
		status := orDefault(cfg.(*trafficpolicy.DenyConfig).StatusCode, http.StatusForbidden)
		return func(w http.ResponseWriter, _ *http.Request, _ func() map[string]any) *http.Request {
			w.WriteHeader(status)
			return nil
		}, nil
	})
	registerRequestAction("custom-response", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (requestFunc, error) {
		body, headers, status, err := compileCustomResponse(a, cfg.(*trafficpolicy.CustomResponseConfig))
		if err != nil {
			return nil, err
		}
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			b, err := body.Render(vars())
			if err == nil {
				err = headers.render(vars(), w.Header().Set)
			}
			if err != nil {
				policyFailed(w, r, fmt.Errorf("%s: %v", a.Path, err))
				return nil
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, b)
			return nil
		}, nil
	})
	registerRequestAction("add-headers", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		headers, err := compileHeaders(a, cfg.(*trafficpolicy.AddHeadersConfig).Headers)
		if err != nil {
			return nil, err
		}
		results := tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			r = withOwnHeader(r)
			var added map[string]any
			if results {
				added = map[string]any{}
			}
			err := headers.render(vars(), func(k, v string) {
				if added != nil {
					added[strings.ToLower(k)] = v
				}
				if strings.EqualFold(k, "Host") {
					r.Host = v
					return
				}
				r.Header.Add(k, v)
			})
			if err != nil {
				policyFailed(w, r, fmt.Errorf("%s: %v", a.Path, err))
				return nil
			}
			if results {
				trafficpolicy.SetResult(vars(), "add_headers", map[string]any{"headers_added": added})
			}
			return r
		}, nil
	})
	registerRequestAction("remove-headers", func(_ *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.RemoveHeadersConfig)
		return func(_ http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request {
			r = withOwnHeader(r)
			removeHeaders(r.Header, c.Headers)
			return r
		}, nil
	})
	registerRequestAction("redirect", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.RedirectConfig)
		if err := noInterpolation(a, "from", c.From); err != nil {
			return nil, err
		}
		to, err := trafficpolicy.CompileTemplate(a.Phase, c.To)
		if err != nil {
			return nil, fmt.Errorf("%s.config.to: %v", a.Path, err)
		}
		headers, err := compileHeaders(a, c.Headers)
		if err != nil {
			return nil, err
		}
		from := compileOptional(c.From)
		status := orDefault(c.StatusCode, http.StatusFound)
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			target, err := to.Render(vars())
			if err == nil {
				err = headers.render(vars(), w.Header().Set)
			}
			if err != nil {
				policyFailed(w, r, fmt.Errorf("%s: %v", a.Path, err))
				return nil
			}
			loc, ok := rewrite(from, fullURL(r), target)
			if tp.results {
				trafficpolicy.SetResult(vars(), "redirect", map[string]any{"url": loc, "matches": matches(from, fullURL(r))})
			}
			if !ok {
				return r
			}
			w.Header().Set("Location", loc)
			w.WriteHeader(status)
			return nil
		}, nil
	})
	registerRequestAction("url-rewrite", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.URLRewriteConfig)
		if err := noInterpolation(a, "from", c.From); err != nil {
			return nil, err
		}
		toTemplate, err := trafficpolicy.CompileTemplate(a.Phase, c.To)
		if err != nil {
			return nil, fmt.Errorf("%s.config.to: %v", a.Path, err)
		}
		from := compileOptional(c.From)
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			target, err := toTemplate.Render(vars())
			if err != nil {
				policyFailed(w, r, fmt.Errorf("%s: %v", a.Path, err))
				return nil
			}
			to, ok := rewrite(from, fullURL(r), target)
			if tp.results {
				trafficpolicy.SetResult(vars(), "url_rewrite", map[string]any{"url": to, "matches": matches(from, fullURL(r))})
			}
			if !ok {
				return r
			}
			u, err := url.Parse(to)
			if err != nil || (u.Path != "" && !strings.HasPrefix(u.Path, "/")) {
				policyFailed(w, r, fmt.Errorf("%s: the rewritten URL %q is not a URL with an absolute path", a.Path, to))
				return nil
			}
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath, r2.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
			if r2.URL.Path == "" {
				r2.URL.Path = "/"
			}
			r2.RequestURI = r2.URL.RequestURI()
			return r2
		}, nil
	})
	registerRequestAction("restrict-ips", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.RestrictIPsConfig)
		if len(c.IPPolicies) > 0 {
			return nil, fmt.Errorf("%s: ip_policies in the restrict-ips action are not applied yet", a.Path)
		}
		f, err := NewIPFilter(c.Allow, c.Deny)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", a.Path, err)
		}
		enforced, results := c.Enforce == nil || *c.Enforce, tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			allowed, cidr := f.decide(ClientAddr(r))
			if results {
				action := "allow"
				if !allowed {
					action = "deny"
				}
				trafficpolicy.SetResult(vars(), "restrict_ips", map[string]any{"action": action, "matched_cidr": cidr})
			}
			if !allowed && enforced {
				ErrorPage(w, r, http.StatusForbidden, 3205, "Access to this endpoint is denied by its traffic policy's IP restriction.")
				return nil
			}
			return r
		}, nil
	})
}
