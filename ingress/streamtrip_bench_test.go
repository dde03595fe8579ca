package ingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/benchcpu"
)

// BenchmarkStreamRoundTrip measures one kept-alive request and its 64-byte answer through the
// agent's transport alone, edgeplane's stream exchange against net/http's Transport configured
// as the proxy configured it before, over a TCP connection to an upstream in this process
// (standing in for the agent's stream): "cpu-ns/op" is the process's CPU time per request,
// upstream included, the same work for both; "writes/op" the writes on the stream, each a frame
// to a real agent. The post rows send a 300-byte body that is not in memory (as a public
// client's is not).
//
//	go test -run XXX -bench StreamRoundTrip -benchtime 20000x -count 5 ./ingress/
func BenchmarkStreamRoundTrip(b *testing.B) {
	addr := serveUpstreamB(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(make([]byte, 64))
	}))
	var writes atomic.Int64
	dial := func(ctx context.Context) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &writeCounter{Conn: c, n: &writes}, nil
	}
	nethttp := &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		DisableCompression:     true,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	payload := strings.Repeat("p", 300)
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
		post bool
	}{{"net-http", nethttp, false}, {"stream", newStreamTransport(), false}, {"net-http/post", nethttp, true}, {"stream/post", newStreamTransport(), true}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.WithValue(context.Background(), dialKey, &dialInfo{proto: "http", dial: dial})
			get, _ := http.NewRequestWithContext(ctx, "GET", "http://ebench.c1/orders/42", nil)
			get.Header.Set("User-Agent", "bench/1.0")
			get.Header.Set("X-Forwarded-For", "192.0.2.1")
			do := func() {
				req := get
				if c.post {
					// A body net/http cannot see through, as a server's request body; the
					// request is made anew each time (its allocations count in the post rows).
					req = get.Clone(ctx)
					req.Method, req.URL.Path = "POST", "/orders"
					req.Body, req.ContentLength = io.NopCloser(struct{ io.Reader }{strings.NewReader(payload)}), int64(len(payload))
				}
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
			writes.Store(0)
			b.ResetTimer()
			benchcpu.PerOp(b)
			for range b.N {
				do()
			}
			b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
		})
	}
}

// writeCounter counts the writes on a connection.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
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
