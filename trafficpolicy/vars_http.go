package trafficpolicy

import (
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/mileusna/useragent"
)

// The req.* and res.* variables, as ngrok documents them. Header and query parameter maps have
// lower-case names as keys and every value of the name as a list.
func init() {
	str, num := cel.StringType, cel.IntType
	strMap := cel.MapType(str, str)
	listMap := cel.MapType(str, cel.ListType(str))
	cookies := cel.MapType(str, cel.ListType(cel.MapType(str, cel.DynType)))
	req := func(f func(r *http.Request, s *sources) any) func(*sources) any {
		return func(s *sources) any { return f(s.req, s) }
	}
	declare(inRequest, str, map[string]func(*sources) any{
		"req.method":            req(func(r *http.Request, _ *sources) any { return r.Method }),
		"req.url":               req(func(r *http.Request, s *sources) any { return publicURL(r, s.scheme(), r.URL.RequestURI()) }),
		"req.url.raw":           req(func(r *http.Request, s *sources) any { return publicURL(r, s.scheme(), rawURI(r)) }),
		"req.url.scheme":        func(s *sources) any { return s.scheme() },
		"req.url.authority":     req(func(r *http.Request, _ *sources) any { return r.Host }),
		"req.url.host":          req(func(r *http.Request, _ *sources) any { return hostOnly(r.Host) }),
		"req.url.path":          req(func(r *http.Request, _ *sources) any { return r.URL.Path }),
		"req.url.raw_path":      req(func(r *http.Request, _ *sources) any { p, _, _ := strings.Cut(rawURI(r), "?"); return p }),
		"req.url.query":         req(func(r *http.Request, _ *sources) any { return r.URL.RawQuery }),
		"req.url.uri":           req(func(r *http.Request, _ *sources) any { return r.URL.RequestURI() }),
		"req.url.user_password": req(func(r *http.Request, _ *sources) any { return r.URL.User.String() }),
		"req.host":              req(func(r *http.Request, _ *sources) any { return r.Host }),
		"req.location":          req(func(r *http.Request, _ *sources) any { return r.Header.Get("Location") }),
		"req.content_type":      req(func(r *http.Request, _ *sources) any { return mediaType(r.Header) }),
		"req.content_type.raw":  req(func(r *http.Request, _ *sources) any { return r.Header.Get("Content-Type") }),
		"req.user_agent":        req(func(r *http.Request, _ *sources) any { return r.Header.Get("User-Agent") }),
		"req.version":           req(func(r *http.Request, _ *sources) any { return r.Proto }),
	})
	declare(inRequest, num, map[string]func(*sources) any{
		"req.content_length": req(func(r *http.Request, _ *sources) any { return r.ContentLength }),
		"req.url.port": req(func(r *http.Request, _ *sources) any {
			_, port, _ := net.SplitHostPort(r.Host)
			p, _ := strconv.Atoi(port)
			return int64(p)
		}),
	})
	declare(inRequest, listMap, map[string]func(*sources) any{
		"req.headers":          req(func(r *http.Request, _ *sources) any { return lowerKeys(r.Header) }),
		"req.trailers":         func(*sources) any { return map[string][]string{} }, // not yet received when the phase runs
		"req.url.query_params": req(func(r *http.Request, _ *sources) any { return map[string][]string(r.URL.Query()) }),
	})
	declare(inRequest, strMap, map[string]func(*sources) any{
		"req.content_type.parameters": req(func(r *http.Request, _ *sources) any { return mediaParams(r.Header) }),
	})
	declare(inRequest, cel.ListType(str), map[string]func(*sources) any{
		"req.content_encoding": req(func(r *http.Request, _ *sources) any { return codings(r.Header) }),
	})
	declare(inRequest, cookies, map[string]func(*sources) any{
		"req.cookies": req(func(r *http.Request, _ *sources) any {
			out := map[string][]map[string]any{}
			for _, c := range r.Cookies() {
				out[c.Name] = append(out[c.Name], map[string]any{"name": c.Name, "value": c.Value})
			}
			return out
		}),
	})
	declare(inRequest, cel.TimestampType, map[string]func(*sources) any{
		"req.ts.header_received": func(s *sources) any { return s.received },
	})
	declareUnavailable(inRequest, "edgeplane streams a request's body to the upstream: when it was received is not known while the policy runs", map[string]*cel.Type{
		"req.ts.body_received": cel.TimestampType,
	})
	ua := func(f func(u *useragent.UserAgent) any) func(*sources) any {
		return func(s *sources) any { return f(s.userAgent()) }
	}
	declare(inRequest, str, map[string]func(*sources) any{
		"req.user_agent.name":       ua(func(u *useragent.UserAgent) any { return u.Name }),
		"req.user_agent.version":    ua(func(u *useragent.UserAgent) any { return u.Version }),
		"req.user_agent.os":         ua(func(u *useragent.UserAgent) any { return u.OS }),
		"req.user_agent.os_version": ua(func(u *useragent.UserAgent) any { return u.OSVersion }),
		"req.user_agent.device":     ua(func(u *useragent.UserAgent) any { return u.Device }),
		"req.user_agent.url":        ua(func(u *useragent.UserAgent) any { return u.URL }),
	})
	declare(inRequest, cel.BoolType, map[string]func(*sources) any{
		"req.user_agent.is_mobile":  ua(func(u *useragent.UserAgent) any { return u.Mobile }),
		"req.user_agent.is_tablet":  ua(func(u *useragent.UserAgent) any { return u.Tablet }),
		"req.user_agent.is_desktop": ua(func(u *useragent.UserAgent) any { return u.Desktop }),
		"req.user_agent.is_bot":     ua(func(u *useragent.UserAgent) any { return u.Bot }),
	})

	declare(inResponse, num, map[string]func(*sources) any{
		"res.status_code": func(s *sources) any { return int64(s.status) },
		"res.content_length": func(s *sources) any {
			if v, err := strconv.ParseInt(s.resHeader.Get("Content-Length"), 10, 64); err == nil {
				return v
			}
			return int64(-1)
		},
	})
	declare(inResponse, str, map[string]func(*sources) any{
		"res.content_type":     func(s *sources) any { return mediaType(s.resHeader) },
		"res.content_type.raw": func(s *sources) any { return s.resHeader.Get("Content-Type") },
		"res.location":         func(s *sources) any { return s.resHeader.Get("Location") },
	})
	declare(inResponse, listMap, map[string]func(*sources) any{
		"res.headers":  func(s *sources) any { return lowerKeys(s.resHeader) },
		"res.trailers": func(*sources) any { return map[string][]string{} }, // not yet received when the phase runs
	})
	declare(inResponse, strMap, map[string]func(*sources) any{
		"res.content_type.parameters": func(s *sources) any { return mediaParams(s.resHeader) },
	})
	declare(inResponse, cel.ListType(str), map[string]func(*sources) any{
		"res.content_encoding": func(s *sources) any { return codings(s.resHeader) },
	})
	declare(inResponse, cookies, map[string]func(*sources) any{
		"res.cookies": func(s *sources) any {
			out := map[string][]map[string]any{}
			for _, c := range (&http.Response{Header: s.resHeader}).Cookies() {
				var expires any = time.Time{}
				if !c.Expires.IsZero() {
					expires = c.Expires
				}
				unparsed := map[string]string{}
				for _, u := range c.Unparsed {
					k, v, _ := strings.Cut(u, "=")
					unparsed[k] = v
				}
				out[c.Name] = append(out[c.Name], map[string]any{"name": c.Name, "value": c.Value, "domain": c.Domain,
					"path": c.Path, "expires": expires, "max_age": time.Duration(c.MaxAge) * time.Second, "secure": c.Secure,
					"http_only": c.HttpOnly, "same_site": sameSite(c.SameSite), "unparsed_attributes": unparsed})
			}
			return out
		},
	})
}

// userAgent is the request's first User-Agent parsed into its parts, once per request however
// many of them the policy reads (mileusna/useragent, whose parts are the ones ngrok names).
func (s *sources) userAgent() *useragent.UserAgent {
	p := s.lazyParts()
	if p.ua == nil {
		u := useragent.Parse(s.req.Header.Get("User-Agent"))
		p.ua = &u
	}
	return p.ua
}

// publicURL is the request's URL as the client asked for it: scheme, host and uri.
func publicURL(r *http.Request, scheme, uri string) string {
	return scheme + "://" + r.Host + uri
}

// rawURI is the request target as the client sent it.
func rawURI(r *http.Request) string {
	if r.RequestURI != "" && strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

func mediaType(h http.Header) string {
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

func mediaParams(h http.Header) map[string]string {
	_, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || params == nil {
		return map[string]string{}
	}
	return params
}

// codings are the Content-Encoding header's codings, in order, lower-cased.
func codings(h http.Header) []string {
	out := []string{}
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" {
				out = append(out, c)
			}
		}
	}
	return out
}

func sameSite(s http.SameSite) string {
	switch s {
	case http.SameSiteLaxMode:
		return "Lax"
	case http.SameSiteStrictMode:
		return "Strict"
	case http.SameSiteNoneMode:
		return "None"
	}
	return ""
}

func lowerKeys(h http.Header) map[string][]string {
	m := make(map[string][]string, len(h))
	for k, v := range h {
		k = strings.ToLower(k)
		m[k] = append(m[k], v...)
	}
	return m
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
