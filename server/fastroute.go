package server

import (
	"net/http"
	"strings"
)

// fastRoute is a GET-by-id route that route dispatches without the ServeMux: the most frequent
// request of the API. The mux cleans the path, escapes it again and unescapes every segment it
// matches, for every request; for a path that is already clean and has nothing to escape that is
// about a twentieth of the work of a GET the read cache answers (callgrind, docs/performance.md).
type fastRoute struct {
	pattern string // what the mux would set as the request's Pattern
	h       http.Handler
}

// route serves r: a GET of /<collection>/<id> whose path the mux would leave as it is through
// its fast route, anything else through the mux. The request it hands on is the one the mux
// would: the same Pattern and the same path value "id".
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if f, id, ok := s.fastRouteOf(r); ok {
		r.Pattern = f.pattern
		r.SetPathValue("id", id)
		f.h.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// fastRouteOf returns the fast route of r and the id its path names. It takes only paths the mux
// would match as they are: a GET (not HEAD, not CONNECT) whose path was sent without escapes,
// and whose last segment is a non-empty run of the bytes ids are made of, so that cleaning,
// escaping and unescaping change nothing; the rest of the path must be a collection's path
// exactly, so no dot segments or doubled slashes pass.
func (s *Server) fastRouteOf(r *http.Request) (fastRoute, string, bool) {
	if r.Method != http.MethodGet || r.URL.RawPath != "" {
		return fastRoute{}, "", false
	}
	p := r.URL.Path
	i := len(p) - 1
	for i >= 0 && idByte[p[i]] {
		i--
	}
	if i <= 0 || i == len(p)-1 || p[i] != '/' {
		return fastRoute{}, "", false
	}
	f, ok := s.fast[p[:i+1]]
	return f, p[i+1:], ok
}

// keepFastRoutes drops the fast routes the mux might not choose for every id: a collection path
// under which another GET route of one more segment is registered (a literal the mux would
// prefer for its one id), or one for which the mux does not choose the route's own pattern. Run
// once, after every route is registered.
func (s *Server) keepFastRoutes() {
	for prefix, f := range s.fast {
		for _, rt := range s.routes {
			rest, ok := strings.CutPrefix(rt.path, prefix)
			if ok && rt.method == http.MethodGet && !strings.Contains(rest, "/") && rt.method+" "+rt.path != f.pattern {
				delete(s.fast, prefix)
			}
		}
		probe, err := http.NewRequest(http.MethodGet, prefix+"x", nil)
		if _, pattern := s.mux.Handler(probe); err != nil || pattern != f.pattern {
			delete(s.fast, prefix)
		}
	}
}

// idByte says which bytes an id on the fast route may hold: letters, digits, '_' and '-', which
// path cleaning, escaping and unescaping all leave as they are.
var idByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	return t
}()
