package server

import (
	"net/http"
	"slices"
	"strings"
)

// CORS lets browser clients call the API from the configured origins. Tokens travel in the
// Authorization header, never in cookies, so no credentials mode is offered.
type cors struct {
	any     bool
	origins []string
}

const (
	corsMethods = "GET, POST, PUT, PATCH, DELETE"
	corsHeaders = "Authorization, Content-Type, Ngrok-Version, Service-Version"
	corsExpose  = "Ngrok-Operation-Id, Retry-After"
	corsMaxAge  = "600"
)

func newCORS(origins []string) *cors {
	c := &cors{}
	for _, o := range origins {
		o = strings.TrimRight(strings.TrimSpace(o), "/")
		switch o {
		case "":
		case "*":
			c.any = true
		default:
			c.origins = append(c.origins, o)
		}
	}
	return c
}

// handle sets the CORS headers of a request from an allowed origin and answers its preflight; it
// reports whether the request has been answered.
func (c *cors) handle(w http.ResponseWriter, r *http.Request) bool {
	if !c.any && len(c.origins) == 0 {
		return false // no CORS configured: nothing to look up
	}
	origin := canonicalHeader(r.Header, "Origin")
	if origin == "" || (!c.any && !slices.Contains(c.origins, origin)) {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	if c.any {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", corsMethods)
		h.Set("Access-Control-Allow-Headers", corsHeaders)
		h.Set("Access-Control-Max-Age", corsMaxAge)
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	h.Set("Access-Control-Expose-Headers", corsExpose)
	return false
}
