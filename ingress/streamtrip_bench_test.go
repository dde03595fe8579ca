package ingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/benchcpu"
)

// BenchmarkStreamRoundTrip measures one kept-alive request and its 64-byte answer through the
// agent's transport alone, edgeplane's stream exchange against net/http's Transport configured
// as the proxy configured it before, over a TCP connection to an upstream in this process
// (standing in for the agent's stream): "cpu-ns/op" is the process's CPU time per request,
// upstream included, the same work for both.
//
//	go test -run XXX -bench StreamRoundTrip -benchtime 20000x -count 5 ./ingress/
func BenchmarkStreamRoundTrip(b *testing.B) {
	addr := serveUpstreamB(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 64))
	}))
	dial := func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", addr) }
	nethttp := &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		DisableCompression:     true,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{{"net-http", nethttp}, {"stream", newStreamTransport()}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.WithValue(context.Background(), dialKey, &dialInfo{proto: "http", dial: dial})
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://ebench.c1/orders/42", nil)
			req.Header.Set("User-Agent", "bench/1.0")
			req.Header.Set("X-Forwarded-For", "192.0.2.1")
			do := func() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				if n, _ := io.Copy(io.Discard, resp.Body); n != 64 {
					b.Fatalf("answer of %d bytes", n)
				}
				resp.Body.Close()
			}
			for range 100 {
				do()
			}
			b.ReportAllocs()
			b.ResetTimer()
			benchcpu.PerOp(b)
			for range b.N {
				do()
			}
		})
	}
}

func serveUpstreamB(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	us := &http.Server{Handler: h}
	go func() { _ = us.Serve(ln) }()
	b.Cleanup(func() { us.Close() })
	return ln.Addr().String()
}
