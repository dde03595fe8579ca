// Package inspect is the traffic inspector's memory: every public request and connection the
// data plane carries, kept per account in a ring bounded by entries and by bytes, with the
// secrets of its headers redacted before it is kept. The public listeners fill it (package
// ingress reports each finished request or connection once); the web console reads it (package
// console) through Source, so entries recorded by other replicas can be joined in later without
// the console changing.
package inspect

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kinds of entries: the listener and protocol the public client used.
const (
	KindHTTP  = "http"  // a request on the public HTTP listener
	KindHTTPS = "https" // a request on the public TLS listener, terminated here
	KindTLS   = "tls"   // a TLS connection (passed through, or terminated for a tls endpoint or edge)
	KindTCP   = "tcp"   // a TCP connection
)

// MaxBody is how much of a request's or response's body an entry keeps, when its account asked
// for bodies.
const MaxBody = 16 << 10

// Entry is one public request or connection as the inspector keeps it. The recorder fills ID,
// Replica and the size; the listeners fill the rest. Once recorded an entry is never changed,
// so readers share it without locks.
type Entry struct {
	ID      uint64    `json:"id"`
	Replica string    `json:"replica"`
	Account string    `json:"-"`
	Time    time.Time `json:"time"`
	// Duration is from the request's (or connection's) arrival to the end of its answer.
	Duration time.Duration `json:"-"`
	Kind     string        `json:"kind"`
	Client   string        `json:"client"` // the public client's ip:port
	Host     string        `json:"host"`   // the Host header, the SNI, or the TCP address
	Method   string        `json:"method,omitempty"`
	Path     string        `json:"path,omitempty"`  // the request URI as the client sent it
	Proto    string        `json:"proto,omitempty"` // HTTP/1.1, HTTP/2.0
	Status   int           `json:"status,omitempty"`
	// Upgraded is set for a request whose connection was taken over (a websocket): its status
	// line was written by the agent's answer on the raw connection.
	Upgraded bool `json:"upgraded,omitempty"`
	// BytesIn and BytesOut are the body bytes (or, for a connection, all bytes) from the client
	// and to it.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// EndpointProto is the protocol of the agent's endpoint that took the traffic (https for
	// https://app.example.com), "" when an edge took it; EndpointURL is the endpoint. A constant
	// string, where the URL would be a new one for every request.
	EndpointProto string `json:"endpoint_proto,omitempty"`
	// Edge, Route and Backend name the edge's objects that took it: the backend is the one
	// chosen, a tunnel group, static address or HTTP response inside any failover or weighted.
	Edge    string `json:"edge,omitempty"`
	Route   string `json:"route,omitempty"`
	Backend string `json:"backend,omitempty"`
	// ErrorCode is the ngrok error code edgeplane answered with (ERR_NGROK_3200 ...), if any.
	ErrorCode string `json:"error_code,omitempty"`
	// Note says in words what became of a connection that carried nothing (refused by the
	// endpoint's rules, no backend, the agent unreachable, a failed handshake).
	Note string `json:"note,omitempty"`
	// RequestHeader and ResponseHeader are the headers as the client sent them and as it was
	// answered, with the values of Redacted headers replaced.
	RequestHeader  Header `json:"request_header,omitempty"`
	ResponseHeader Header `json:"response_header,omitempty"`
	// RequestBody and ResponseBody are the first MaxBody bytes of the bodies, kept only when the
	// account asked for bodies; the Cut flags say there was more.
	RequestBody     []byte `json:"request_body,omitempty"`
	RequestBodyCut  bool   `json:"request_body_cut,omitempty"`
	ResponseBody    []byte `json:"response_body,omitempty"`
	ResponseBodyCut bool   `json:"response_body_cut,omitempty"`
	// Bodies records whether the account kept bodies when the entry was recorded, so an empty
	// body is told apart from one that was not kept.
	Bodies bool `json:"bodies"`

	size int64
}

// EndpointURL is the URL of the endpoint that took the traffic, or "" when an edge did.
func (e *Entry) EndpointURL() string {
	if e.EndpointProto == "" {
		return ""
	}
	return e.EndpointProto + "://" + e.Host
}

// DurationMS is the entry's duration in milliseconds, for the console.
func (e *Entry) DurationMS() float64 { return float64(e.Duration.Microseconds()) / 1000 }

// Size is the memory the entry is accounted for in its ring.
func (e *Entry) Size() int64 { return e.size }

// IsHTTP reports whether the entry is a request (which can be replayed) rather than a
// connection.
func (e *Entry) IsHTTP() bool { return e.Kind == KindHTTP || e.Kind == KindHTTPS }

// entryOverhead is what an entry costs beyond its strings, headers and bodies: the struct, the
// ring's slot and the allocator's rounding.
const entryOverhead = 512

// measure computes the memory the entry is accounted for: its fixed part, every string and
// slice it holds, and each header value's slice and map slot.
func (e *Entry) measure() int64 {
	n := entryOverhead + len(e.Replica) + len(e.Account) + len(e.Kind) + len(e.Client) + len(e.Host) +
		len(e.Method) + len(e.Path) + len(e.Proto) + len(e.Edge) +
		len(e.Route) + len(e.Backend) + len(e.ErrorCode) + len(e.Note) + cap(e.RequestBody) + cap(e.ResponseBody)
	n += headerSize(e.RequestHeader) + headerSize(e.ResponseHeader)
	return int64(n)
}

// Field is one header line: a name and one of its values.
type Field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Header is a header as an entry keeps it: its lines, in no particular order. A flat list
// rather than a map, so that recording a request copies its header in one allocation and
// hashes nothing; the strings themselves are shared with the request, never copied.
type Header []Field

// CopyHeader copies h, replacing the values of Redacted headers as it goes: a secret is never
// kept, not even for the length of a request. It is the listeners' one copy of each header.
func CopyHeader(h http.Header) Header {
	if len(h) == 0 {
		return nil
	}
	// One pass over the map (iterating it is most of the cost): room for one value a name, which
	// is what almost every header has; a name with several grows the list.
	out := make(Header, 0, len(h))
	for k, vs := range h {
		secret := Redacted(k)
		for _, v := range vs {
			if secret {
				v = RedactedValue
			}
			out = append(out, Field{k, v})
		}
	}
	return out
}

// Get returns the first value of the header name (canonical or not), or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// Sorted returns the lines sorted by name, keeping the order of each name's values.
func (h Header) Sorted() Header {
	out := slices.Clone(h)
	slices.SortStableFunc(out, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// headerSize is the memory of a header: per line its slot and the bytes of its strings (which
// the entry keeps alive).
func headerSize(h Header) int {
	n := 24
	for _, f := range h {
		n += 32 + len(f.Name) + len(f.Value)
	}
	return n
}

// RedactedValue replaces the value of a redacted header.
const RedactedValue = "[redacted by edgeplane]"

// redacted are the headers whose values are never kept: credentials of the client (HTTP
// authentication, which carries basic auth passwords and the bearer tokens JWT validation
// reads), cookies (the sign-in modules' sessions live in them, and an application's), and the
// GitLab webhook header, which carries the webhook_verification secret itself. Signature headers
// of the other webhook providers are kept: an HMAC does not reveal its key, and a replay as
// recorded needs them to pass verification.
var redacted = map[string]bool{
	"Authorization":       true,
	"Proxy-Authorization": true,
	"Cookie":              true,
	"Set-Cookie":          true,
	"X-Gitlab-Token":      true,
}

// Redacted reports whether the values of the header name (canonical or not: HTTP/2 lowercases
// names, and a name net/http cannot canonicalize is kept as sent) are never kept. It compares
// without allocating: it runs on every header line of every request recorded.
func Redacted(name string) bool {
	switch len(name) {
	case len("Cookie"), len("Set-Cookie"), len("Authorization"), len("X-Gitlab-Token"), len("Proxy-Authorization"):
		for _, r := range redactedNames {
			if strings.EqualFold(name, r) {
				return true
			}
		}
	}
	return false
}

// redactedNames are the keys of redacted, for Redacted's comparisons.
var redactedNames = func() []string {
	out := make([]string, 0, len(redacted))
	for k := range redacted {
		out = append(out, k)
	}
	return out
}()

// Redact replaces, in place, the values of h's redacted headers (the answer to a replay, before
// the console shows it).
func Redact(h http.Header) {
	for k, vs := range h {
		if !Redacted(k) {
			continue
		}
		for i := range vs {
			vs[i] = RedactedValue
		}
	}
}

// StatusClass is the entry's status as the filter names it: 2xx ... 5xx, or "" for a
// connection.
func (e *Entry) StatusClass() string {
	if e.Status < 100 || e.Status > 599 {
		return ""
	}
	return string(rune('0'+e.Status/100)) + "xx"
}

// Filter selects entries: each set field must match.
type Filter struct {
	// Status is a class (2xx, 3xx, 4xx, 5xx), an exact status code, or "error" (a status of 400 or
	// more, an ngrok error code, or a connection with a note).
	Status string
	// Host and Path are substrings, compared without regard to case.
	Host, Path string
	// Kind is one of the Kind constants.
	Kind string
}

// Empty reports whether the filter selects every entry.
func (f Filter) Empty() bool { return f == Filter{} }

// Match reports whether e passes the filter.
func (f Filter) Match(e *Entry) bool {
	switch {
	case f.Kind != "" && f.Kind != e.Kind:
		return false
	case f.Host != "" && !containsFold(e.Host, f.Host):
		return false
	case f.Path != "" && !containsFold(e.Path, f.Path):
		return false
	}
	switch s := f.Status; {
	case s == "":
		return true
	case s == "error":
		return e.Status >= 400 || e.ErrorCode != "" || (e.Note != "" && !e.IsHTTP())
	case len(s) == 3 && strings.HasSuffix(s, "xx"):
		return e.StatusClass() == s
	default:
		return s == strconv.Itoa(e.Status)
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
