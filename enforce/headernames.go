package enforce

import "net/http"

// Header names as an upstream may read them. HTTP compares names case-insensitively, and CGI,
// WSGI, Rack and PHP servers go further: they turn a name into a variable by upper-casing it and
// replacing '-' with '_' (HTTP_NGROK_AUTH_USER_EMAIL), so ngrok_auth_user_email and
// Ngrok-Auth_User-Email reach the application as the same value as ngrok-auth-user-email. A
// header edgeplane sets must therefore be removed from a client's request in every spelling that
// folds to its name, not only in its own.

// foldHeaderByte is one byte of a header name as an upstream may read it: ASCII lower case, with
// '_' for '-'.
func foldHeaderByte(c byte) byte {
	if c == '_' {
		return '-'
	}
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// HeaderNameHasPrefix reports whether name, folded (any case, '_' for '-'), starts with prefix,
// given in lower case with hyphens ("ngrok-auth-"). It runs for every header of every public
// request, so it compares in place rather than building the folded name.
func HeaderNameHasPrefix(name, prefix string) bool {
	if len(name) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if foldHeaderByte(name[i]) != prefix[i] {
			return false
		}
	}
	return true
}

// HeaderNameFolds reports whether name, folded (any case, '_' for '-'), is want, given in lower
// case with hyphens ("x-forwarded-proto").
func HeaderNameFolds(name, want string) bool {
	return len(name) == len(want) && HeaderNameHasPrefix(name, want)
}

// The prefixes of the headers that tell the upstream who the client is: ngrok-auth-* (set by
// the sign-in modules) and ngrok-mtls-* (set by mutual TLS). A client's own, in any spelling,
// never reach an upstream: one that trusts them while a module is on must not be told a name
// of the client's choosing on a route or endpoint where it is off.
const (
	identityHeaderPrefix   = "ngrok-auth-"
	clientCertHeaderPrefix = "ngrok-mtls-"
)

// forwardedHeaders are the X-Forwarded-* headers edgeplane writes itself. A client's spelling
// with underscores (X_Forwarded_Proto) is removed: to a CGI or WSGI upstream it is the same
// variable as the one edgeplane sets, and would stand beside or before it.
var forwardedHeaders = []string{"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"}

// StripClientHeaders removes from a public client's request every header that only edgeplane
// may set, in every spelling an upstream reads as the same name: ngrok-auth-* and ngrok-mtls-*
// entirely, and the X-Forwarded-* ones that are not spelled the canonical way (those edgeplane
// replaces or appends to when it forwards the request). It runs first on every public request,
// at edges and on agent binds.
func StripClientHeaders(h http.Header) {
	for k := range h {
		if HeaderNameHasPrefix(k, identityHeaderPrefix) || HeaderNameHasPrefix(k, clientCertHeaderPrefix) {
			delete(h, k)
			continue
		}
		for _, f := range forwardedHeaders {
			if HeaderNameFolds(k, f) && k != http.CanonicalHeaderKey(f) {
				delete(h, k)
			}
		}
	}
}
