package trafficpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
	"github.com/mileusna/useragent"
)

// The variables of a phase are kept in a map (what ConnVars, RequestVars and ResponseVars
// return, and what Match and Render take) holding the sources they are read from (the
// connection's addresses, the request, the response's status and headers, the endpoint) under
// a key no expression can name. Each variable is computed from them the first time an
// expression reads it, and kept in the map: a policy pays for the variables it reads, not for
// the ones ngrok defines. Beside them the map holds the policy's own state, which is not derived
// from traffic: the variables set-vars defines (vars) and the results of actions (actions).

// srcKey is where a variables map keeps its sources.
const srcKey = "\x00src"

// Endpoint is what the endpoint.* variables read: the agent endpoint or edge the traffic came
// to. Account is not a variable; it names whose policy runs (in log records).
type Endpoint struct {
	ID, URL, Protocol, Host string
	Port                    int
	Account                 string
	// Route is the edge route's id, when the policy is a route's.
	Route string
}

// sources are what a phase's variables are computed from. The struct stays in the 144-byte
// size class it is allocated from for every request of a policy: what only some policies read
// (a parsed user agent, the served certificate) hangs off parts, allocated when first read.
type sources struct {
	client, server string
	connStart      time.Time
	req            *http.Request
	received       time.Time
	https          bool // the public scheme: https, else http
	// atConnect says the variables are on_tcp_connect's: conn.bytes_* are those of a
	// connection just established, 0 each way. (Beside https, in its padding: the struct is
	// allocated per request and must not grow a size class.)
	atConnect bool
	status    int32
	resHeader http.Header
	endpoint  *Endpoint
	tls       *tls.ConnectionState
	conn      Conn
	parts     *parts
	// sni is the ClientHello's server name, read as conn.tls.sni before the handshake ends.
	sni string
}

// parts are what is computed once per request for several variables.
type parts struct {
	ua         *useragent.UserAgent
	served     *x509.Certificate
	servedDone bool
}

func (s *sources) lazyParts() *parts {
	if s.parts == nil {
		s.parts = &parts{}
	}
	return s.parts
}

// scheme is the public scheme of the request.
func (s *sources) scheme() string {
	if s.https {
		return "https"
	}
	return "http"
}

// Conn is what the listener knows of a request's connection beyond its addresses.
// enforce.ConnInfo is one.
type Conn interface {
	// ServedCertificate is the certificate edgeplane presents to clients asking for
	// serverName on this connection's listener (the one its handshake got), nil when none.
	ServedCertificate(serverName string) *x509.Certificate
	// Bytes are the bytes read from and written to the client so far (its TLS records
	// included); counted is false when the listener does not count this connection's.
	Bytes() (in, out int64, counted bool)
	// JA4 is the JA4 fingerprint of the connection's ClientHello, "" for a connection without
	// TLS; known is false when the listener did not fingerprint this connection.
	JA4() (fingerprint string, known bool)
}

// SetConn gives the connection variables their connection (conn.tls.server.*, conn.bytes_*,
// conn.tls.ja4_fingerprint).
func SetConn(vars map[string]any, c Conn) { sourcesOf(vars).conn = c }

// variable is one variable ngrok defines: its CEL type, where it exists and how it is computed.
type variable struct {
	typ   *cel.Type
	scope scope
	get   func(s *sources) any
	// unavailable says why edgeplane cannot fill the variable; an expression reading it fails
	// its policy closed when the stage is built (see Policy.Unavailable).
	unavailable string
}

// scope is the phases a variable exists in.
type scope int

const (
	inConn     scope = iota // every phase
	inRequest               // on_http_request and after
	inResponse              // on_http_response and on_event_stream_message
)

// variables is every variable edgeplane declares, by name; vars_*.go fill it.
var variables = map[string]variable{}

func declare(scope scope, typ *cel.Type, vars map[string]func(s *sources) any) {
	for name, get := range vars {
		if _, dup := variables[name]; dup {
			panic("trafficpolicy: variable " + name + " declared twice")
		}
		variables[name] = variable{typ: typ, scope: scope, get: get}
	}
}

// declareUnavailable declares variables ngrok defines that edgeplane cannot fill, each with why.
func declareUnavailable(scope scope, why string, vars map[string]*cel.Type) {
	for name, typ := range vars {
		variables[name] = variable{typ: typ, scope: scope, unavailable: why}
	}
}

// activation is a variables map as CEL reads it: a name the map holds is answered from it, any
// other variable is computed from the map's sources and kept. The conversion allocates nothing.
type activation map[string]any

// ResolveName answers a variable by its qualified name.
func (a activation) ResolveName(name string) (any, bool) {
	if v, ok := a[name]; ok {
		return v, true
	}
	switch name {
	case "vars":
		return map[string]any{}, true
	case "actions":
		return map[string]any{"ngrok": map[string]any{}}, true
	}
	v, ok := variables[name]
	if !ok {
		return nil, false
	}
	src, _ := a[srcKey].(*sources)
	if src == nil || v.get == nil {
		if v.unavailable != "" {
			return types.NewErr("%s: %s", name, v.unavailable), true
		}
		return nil, false
	}
	val := v.get(src)
	a[name] = val
	return val, true
}

// Parent is nil: the map is the whole activation.
func (activation) Parent() interpreter.Activation { return nil }

// Lookup returns the value of a variable in vars as an expression would read it.
func Lookup(vars map[string]any, name string) (any, bool) {
	return activation(vars).ResolveName(name)
}

// sourcesOf returns the sources of vars, adding them when it has none.
func sourcesOf(vars map[string]any) *sources {
	if s, ok := vars[srcKey].(*sources); ok {
		return s
	}
	s := &sources{}
	vars[srcKey] = s
	return s
}

// ConnVars are the variables of a connection from client to server (host:port strings).
func ConnVars(client, server string) map[string]any {
	vars := make(map[string]any, 8)
	vars[srcKey] = &sources{client: client, server: server}
	return vars
}

// SetConnStart gives the connection variables the time the connection was accepted
// (conn.ts.start); without it, the time the variable is first read.
func SetConnStart(vars map[string]any, t time.Time) { sourcesOf(vars).connStart = t }

// SetServerName gives conn.tls.sni the ClientHello's server name, for expressions evaluated
// before the handshake is done (TLSSelector).
func SetServerName(vars map[string]any, name string) { sourcesOf(vars).sni = name }

// AtConnect marks the variables as on_tcp_connect's, taken when the connection is established
// and before any byte of it is carried: conn.bytes_in and conn.bytes_out read 0.
func AtConnect(vars map[string]any) { sourcesOf(vars).atConnect = true }

// SetEndpoint gives the endpoint.* variables their endpoint.
func SetEndpoint(vars map[string]any, e *Endpoint) { sourcesOf(vars).endpoint = e }

// RequestVars adds a request's variables to the connection's (vars is changed and returned).
// scheme is the public scheme (https on edges; http or https), the host the request's Host.
func RequestVars(vars map[string]any, r *http.Request, scheme string) map[string]any {
	s := sourcesOf(vars)
	s.req, s.https, s.received = r, scheme == "https", time.Now()
	if s.parts != nil {
		s.parts.ua = nil // parsed from the request before
	}
	if s.client == "" {
		s.client = r.RemoteAddr
	}
	s.tls = r.TLS
	return vars
}

// ResponseVars adds a response's variables (its status and headers as the upstream wrote them).
func ResponseVars(vars map[string]any, status int, h http.Header) map[string]any {
	s := sourcesOf(vars)
	s.status, s.resHeader = int32(status), h
	return vars
}

// declarations are the cel.Variable options of a phase's environment.
func declarations(phase string) []cel.EnvOption {
	var opts []cel.EnvOption
	for name, v := range variables {
		switch {
		case v.scope == inRequest && phase == OnTCPConnect:
			continue
		case v.scope == inResponse && (phase == OnTCPConnect || phase == OnHTTPRequest):
			continue
		}
		opts = append(opts, cel.Variable(name, v.typ))
	}
	return append(opts,
		cel.Variable("vars", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("actions", cel.MapType(cel.StringType, cel.DynType)))
}
