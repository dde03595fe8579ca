package edgeplane

import "net/http"

// fixedHeaders are the headers the request_headers and response_headers modules may neither add
// nor remove, with the reason. The hop-by-hop headers of RFC 9110 section 7.6.1 describe one
// connection, not the message, and the proxy sets them itself; Host and Content-Length frame
// the message, so changing them would send the request to another site or corrupt the body.
var fixedHeaders = map[string]string{
	"Connection":          "it is a hop-by-hop header",
	"Keep-Alive":          "it is a hop-by-hop header",
	"Proxy-Connection":    "it is a hop-by-hop header",
	"Proxy-Authenticate":  "it is a hop-by-hop header",
	"Proxy-Authorization": "it is a hop-by-hop header",
	"Te":                  "it is a hop-by-hop header",
	"Trailer":             "it is a hop-by-hop header",
	"Transfer-Encoding":   "it is a hop-by-hop header",
	"Upgrade":             "it is a hop-by-hop header",
	"Host":                "it names the site the request is for",
	"Content-Length":      "it frames the message body",
}

// FixedHeader says why a header module may not add or remove the header name (in any case),
// or returns "" when it may. The API's validation and the agents' bind options share it.
func FixedHeader(name string) string {
	return fixedHeaders[http.CanonicalHeaderKey(name)]
}

// ValidHeaderName reports whether s is an HTTP field name (an RFC 9110 token).
func ValidHeaderName(s string) bool { return validHeaderName(s) }

// ValidHeaderValue reports whether s may be an HTTP field value: no CR, LF or other controls
// but tab.
func ValidHeaderValue(s string) bool { return validHeaderValue(s) }
