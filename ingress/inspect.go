package ingress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/edgeplane/edgeplane/inspect"
)

// Recorder is where the public listeners report their traffic: the web console's inspector.
// Bodies is asked at most once per request, once its account is known, and Record is called
// once per finished request or connection that an account's endpoint or edge took. With no
// Recorder (Config.Recorder nil) the listeners record nothing, allocate nothing for it, and pay
// one nil check per request or connection.
type Recorder interface {
	// Bodies reports whether the account asked to keep bodies (the first inspect.MaxBody bytes
	// of each).
	Bodies(account string) bool
	// Record takes a finished entry; the listeners do not touch it afterwards.
	Record(e *inspect.Entry)
}

// exchange is the record of one public request in progress. It stands in front of the
// server's ResponseWriter and the request's body, counting what passes, and is one allocation
// with the entry it becomes.
type exchange struct {
	entry  inspect.Entry
	rec    Recorder
	w      http.ResponseWriter
	in     countedBody
	status int
	bodies bool
}

// record serves a public request as serve does, recording it: the request's headers as the
// client sent them, its answer's status, headers and size, and what took it (set by serve and
// the edge's handlers through the exchange).
func (p *proxy) record(w http.ResponseWriter, r *http.Request, proto string, rec Recorder) {
	x := &exchange{rec: rec, w: w}
	e := &x.entry
	e.Time, e.Kind, e.Client, e.Method, e.Path, e.Proto = time.Now(), proto, r.RemoteAddr, r.Method, r.RequestURI, r.Proto
	e.RequestHeader = inspect.CopyHeader(r.Header) // before any stage edits it; secrets redacted
	if r.Body != nil && r.Body != http.NoBody {
		x.in = countedBody{x: x, rc: r.Body}
		r.Body = &x.in
	}
	defer x.finish() // also when the proxy aborts the handler (http.ErrAbortHandler)
	p.serve(x, r, proto, x)
}

// finish hands the entry to the recorder, once the answer is written. A request no account's
// endpoint or edge took (an unknown host) is nobody's, and is not kept.
func (x *exchange) finish() {
	e := &x.entry
	if e.Account == "" {
		return
	}
	e.Duration = time.Since(e.Time)
	e.Status = x.status
	if e.Status == 0 && !e.Upgraded {
		e.Status = http.StatusOK // net/http answers 200 for a handler that wrote nothing
	}
	h := x.w.Header()
	e.ResponseHeader = inspect.CopyHeader(h)
	if code := h["Ngrok-Error-Code"]; len(code) > 0 {
		e.ErrorCode = code[0]
	}
	e.Bodies = x.bodies
	x.w, x.in.rc = nil, nil // the entry outlives the request; its writer and body must not
	x.rec.Record(e)
}

// at names the account that took the request (its endpoint's or edge's), and asks the recorder
// once whether it keeps bodies. A nil exchange (recording off) ignores it.
func (x *exchange) at(account string) {
	if x == nil {
		return
	}
	x.entry.Account = account
	x.bodies = x.rec.Bodies(account)
}

// atEndpoint records that an agent's endpoint of proto took the request (its host is the
// request's).
func (x *exchange) atEndpoint(ep Endpoint, proto string) {
	if x == nil {
		return
	}
	x.at(ep.AccountID())
	x.entry.EndpointProto = proto
}

// atEdge records the edge (and, once routed, the route) that took the request.
func (x *exchange) atEdge(account, edge, route string) {
	if x == nil {
		return
	}
	if x.entry.Account == "" {
		x.at(account)
	}
	x.entry.Edge, x.entry.Route = edge, route
}

// atBackend records the backend chosen for the request.
func (x *exchange) atBackend(t target) {
	if x != nil {
		x.entry.Backend = t.backend
	}
}

// keep appends to a kept body up to inspect.MaxBody, and reports whether all of p fit.
func keep(body *[]byte, p []byte) bool {
	room := inspect.MaxBody - len(*body)
	if room <= 0 {
		return len(p) == 0
	}
	*body = append(*body, p[:min(room, len(p))]...)
	return len(p) <= room
}

// Header, WriteHeader and Write make the exchange the handler's ResponseWriter.
func (x *exchange) Header() http.Header { return x.w.Header() }

func (x *exchange) WriteHeader(code int) {
	if x.status == 0 && code >= 200 { // an informational answer (100, 103) comes before the real one
		x.status = code
	}
	x.w.WriteHeader(code)
}

func (x *exchange) Write(p []byte) (int, error) {
	if x.status == 0 {
		x.status = http.StatusOK
	}
	n, err := x.w.Write(p)
	x.entry.BytesOut += int64(n)
	if x.bodies && !keep(&x.entry.ResponseBody, p[:n]) {
		x.entry.ResponseBodyCut = true
	}
	return n, err
}

// FlushError passes a flush on (server-sent events, streamed answers).
func (x *exchange) FlushError() error { return http.NewResponseController(x.w).Flush() }

// Flush is FlushError for callers that use http.Flusher.
func (x *exchange) Flush() { _ = x.FlushError() }

// Hijack passes the connection on to an upgrade (websockets), and records that it happened:
// the agent's answer is then written on the raw connection, past the exchange.
func (x *exchange) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(x.w).Hijack()
	if err == nil {
		x.entry.Upgraded = true
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the server's writer (deadlines, full duplex).
func (x *exchange) Unwrap() http.ResponseWriter { return x.w }

// countedBody counts the request body's bytes as the proxy reads them, and keeps the first
// inspect.MaxBody of them when the account asked for bodies.
type countedBody struct {
	x  *exchange
	rc io.ReadCloser
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	e := &b.x.entry
	e.BytesIn += int64(n)
	if b.x.bodies && !keep(&e.RequestBody, p[:n]) {
		e.RequestBodyCut = true
	}
	return n, err
}

func (b *countedBody) Close() error { return b.rc.Close() }

// connTrace is the record of one public TLS or TCP connection in progress; nil when recording is
// off, and every method of a nil trace does nothing.
type connTrace struct {
	entry inspect.Entry
	rec   Recorder
}

// traceConn starts the record of a connection of kind to host (the SNI or the TCP address).
func (s *Server) traceConn(kind string, c net.Conn, host string) *connTrace {
	if s.cfg.Recorder == nil {
		return nil
	}
	t := &connTrace{rec: s.cfg.Recorder}
	t.entry.Time, t.entry.Kind, t.entry.Client, t.entry.Host = time.Now(), kind, c.RemoteAddr().String(), host
	return t
}

// atEndpoint records the endpoint that took the connection.
func (t *connTrace) atEndpoint(ep Endpoint, proto string) {
	if t != nil {
		t.entry.Account, t.entry.EndpointProto = ep.AccountID(), proto
	}
}

// atEdge records the edge that took the connection.
func (t *connTrace) atEdge(account, edge string) {
	if t != nil {
		t.entry.Account, t.entry.Edge = account, edge
	}
}

// atBackend records the backend chosen for the connection.
func (t *connTrace) atBackend(tg target) {
	if t != nil {
		t.entry.Backend = tg.backend
	}
}

// refused ends the record of a connection that carried nothing, saying why.
func (t *connTrace) refused(why string) {
	if t != nil {
		t.entry.Note = why
		t.done(0, 0)
	}
}

// done ends the record with the bytes carried from the client (in) and to it (out).
func (t *connTrace) done(in, out int64) {
	if t == nil || t.entry.Account == "" {
		return
	}
	t.entry.Duration = time.Since(t.entry.Time)
	t.entry.BytesIn, t.entry.BytesOut = in, out
	t.rec.Record(&t.entry)
}
