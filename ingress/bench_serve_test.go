package ingress

import (
	"context"
	"net"
	"testing"

	"github.com/edgeplane/edgeplane/internal/benchcpu"
)

// benchServe runs serve (a listener of s: ServeHTTP, ServeTLS) on a new loopback listener until
// the benchmark's run ends, and returns a dialer reaching it whatever address a client asks,
// so the benchmarks' clients can use the endpoint's own URL.
func benchServe(b *testing.B, s *Server, serve func(*Server, net.Listener) error) func(ctx context.Context, network, addr string) (net.Conn, error) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = serve(s, ln) }()
	b.Cleanup(func() {
		s.Close()
		ln.Close()
	})
	addr := ln.Addr().String()
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

// benchParallel runs op warm times first (connections open, pools and rings filled, as in a
// deployment), then measures it from parallel goroutines, reporting allocations and the whole
// process's CPU time per op ("cpu-ns/op").
func benchParallel(b *testing.B, warm int, op func()) {
	for range warm {
		op()
	}
	b.ReportAllocs()
	b.ResetTimer()
	benchcpu.PerOp(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op()
		}
	})
}
