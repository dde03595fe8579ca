package ingress

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkPlainHTTPCounting measures what counting every plain HTTP connection's bytes (for
// conn.bytes_*) costs a public request through the HTTP listener to an endpoint: the same
// server, its plain HTTP served without the counting wrapper (counting=off, as before every
// connection was counted) and with it (counting=on, ServeHTTP). Each connection carries many
// requests, so the wrapper's two atomic additions per read and per write are set against the
// whole request's work.
//
//	go test -run XXX -bench PlainHTTPCounting -benchtime 20000x -count 5 ./ingress/
func BenchmarkPlainHTTPCounting(b *testing.B) {
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello from the upstream of the counting benchmark\n")
	})}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = upstream.Serve(uln) }()
	b.Cleanup(func() { upstream.Close() })
	uncounted := func(s *Server, ln net.Listener) error { return s.http.Serve(ln) }
	for _, c := range []struct {
		name  string
		serve func(*Server, net.Listener) error
	}{{"counting=off", uncounted}, {"counting=on", (*Server).ServeHTTP}} {
		b.Run(c.name, func(b *testing.B) { benchPublicRequests(b, uln.Addr().String(), nil, c.serve, false) })
	}
}

// nullConn is a connection whose reads and writes do nothing and succeed: what is left of a
// read or a write through a wrapper is the wrapper's own cost.
type nullConn struct{ net.Conn }

func (nullConn) Read(p []byte) (int, error)  { return len(p), nil }
func (nullConn) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkCountingConnCall is one read and one write of a 4 KiB buffer through the
// connection as the HTTP server holds it, without (counting=off) and with the counting wrapper:
// the difference, set against the system calls a real read and write make and the reads and
// writes of a request, is what counting every plain HTTP connection costs. Unlike
// BenchmarkPlainHTTPCounting it is not lost in a loaded machine's noise.
//
//	go test -run XXX -bench CountingConnCall -count 5 ./ingress/
func BenchmarkCountingConnCall(b *testing.B) {
	buf := make([]byte, 4096)
	for _, c := range []struct {
		name string
		conn net.Conn
	}{{"counting=off", nullConn{}}, {"counting=on", &countingConn{Conn: nullConn{}}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_, _ = c.conn.Read(buf)
				_, _ = c.conn.Write(buf)
			}
		})
	}
}
