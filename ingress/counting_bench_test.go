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
		b.Run(c.name, func(b *testing.B) { benchPublicRequests(b, uln.Addr().String(), nil, c.serve) })
	}
}
