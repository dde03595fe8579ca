package ingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/inspect"
	"github.com/edgeplane/edgeplane/plan"
)

// upstreamEndpoint is an online endpoint whose streams are plain connections to a local
// upstream: the public listener's own work, without an agent.
type upstreamEndpoint struct{ addr string }

func (e *upstreamEndpoint) ID() string            { return "tn_bench" }
func (e *upstreamEndpoint) AccountID() string     { return "acct_bench" }
func (e *upstreamEndpoint) Chain() *enforce.Chain { return nil }
func (e *upstreamEndpoint) DecideConn(net.Conn, *enforce.TLSHello) enforce.ConnVerdict {
	return enforce.ConnVerdict{Allow: true}
}
func (e *upstreamEndpoint) HTTPHandler(build func() http.Handler) http.Handler { return build() }
func (e *upstreamEndpoint) Passthrough() bool                                  { return false }
func (e *upstreamEndpoint) TLSFor(plan.Hello) (plan.ConnTLS, error) {
	return plan.ConnTLS{}, nil
}
func (e *upstreamEndpoint) Dial(ctx context.Context, _, _, _ string, _ bool) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "tcp", e.addr)
}

// BenchmarkPublicRequest measures a public request through the HTTP listener to an endpoint
// (client, listener and upstream in this process) with the traffic inspector off and on:
// "cpu-ns/op" is the CPU time of the whole process per request, steadier than the wall time
// on a shared machine; the difference between the two is what recording costs. The post row
// sends a 300-byte body with each request (its head held for the body: one frame upstream). The inspector's
// ring is full (its bound of entries reached) for most of the run, as in a deployment.
//
//	go test -run XXX -bench PublicRequest -benchtime 20000x -count 5 ./ingress/
func BenchmarkPublicRequest(b *testing.B) {
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello from the upstream of the inspector's benchmark\n")
	})}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = upstream.Serve(uln) }()
	b.Cleanup(func() { upstream.Close() })
	for _, c := range []struct {
		name string
		rec  Recorder
		post bool
	}{
		{"inspector=off", nil, false},
		{"inspector=on", inspect.NewRecorder(inspect.Config{Replica: "rep_bench"}), false},
		{"inspector=off/post", nil, true},
	} {
		b.Run(c.name, func(b *testing.B) { benchPublicRequests(b, uln.Addr().String(), c.rec, (*Server).ServeHTTP, c.post) })
	}
}

// benchPublicRequests runs parallel keep-alive requests through a public listener that serve
// runs on a new server whose one endpoint is the upstream at upstream; rec is its inspector
// (nil: off). "cpu-ns/op" is the whole process's CPU time per request.
func benchPublicRequests(b *testing.B, upstream string, rec Recorder, serve func(*Server, net.Listener) error, post bool) {
	ep := &upstreamEndpoint{addr: upstream}
	s := New(Config{Recorder: rec, Lookup: func(proto, host string) Endpoint {
		if proto == "http" && host == "app.example.com" {
			return ep
		}
		return nil
	}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DialContext: benchServe(b, s, serve)}}
	defer client.CloseIdleConnections()
	get := func() {
		req, _ := http.NewRequest("GET", "http://app.example.com/orders/42?page=1", nil)
		if post {
			// A small POST, its head and body sent together as clients send them.
			req, _ = http.NewRequest("POST", "http://app.example.com/orders", strings.NewReader(benchPostBody))
		}
		req.Header.Set("User-Agent", "bench/1.0")
		req.Header.Set("Accept", "text/plain")
		req.Header.Set("Authorization", "Bearer not-kept")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello") {
			b.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	benchParallel(b, 2000, get)
}

// benchPostBody is the body of the benchmark's small POSTs.
var benchPostBody = strings.Repeat("p", 300)

// answerEndpoint is an endpoint whose handler answers itself, so that a benchmark sees the
// listener's routing and, with the inspector on, the recording, and nothing else.
type answerEndpoint struct{ upstreamEndpoint }

func (e *answerEndpoint) HTTPHandler(func() http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello from the endpoint\n")
	})
}

// discardWriter is a ResponseWriter that keeps its header map and throws the body away.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkRecordHook measures the recording itself: one request routed to an endpoint that
// answers at once, without and with the inspector (its ring full). The difference is what
// recording adds to a request, to be set against edgeplane's CPU time per request of the
// traffic benchmark (tens of microseconds).
//
//	go test -run XXX -bench RecordHook -count 5 ./ingress/
func BenchmarkRecordHook(b *testing.B) {
	ep := &answerEndpoint{}
	s := New(Config{Lookup: func(string, string) Endpoint { return ep }})
	defer s.Close()
	req, _ := http.NewRequest("GET", "http://app.example.com/orders/42?page=1", nil)
	req.RemoteAddr, req.RequestURI = "203.0.113.7:50000", "/orders/42?page=1"
	for k, v := range map[string]string{"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "Accept": "text/html,*/*;q=0.8",
		"Accept-Language": "en-US,en;q=0.5", "Accept-Encoding": "gzip, deflate, br", "Cookie": "session=abc",
		"Referer": "https://app.example.com/orders", "X-Request-Id": "5f0c4a"} {
		req.Header.Set(k, v)
	}
	rec := inspect.NewRecorder(inspect.Config{Replica: "rep_bench"})
	for _, c := range []struct {
		name string
		rec  Recorder
	}{{"inspector=off", nil}, {"inspector=on", rec}} {
		b.Run(c.name, func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			serve := func() {
				clear(w.h)
				if c.rec == nil {
					s.proxy.serve(w, req, "http", nil)
				} else {
					s.proxy.record(w, req, "http", c.rec)
				}
			}
			for range 2 * inspect.DefaultEntries {
				serve() // the ring full, as it is in a deployment
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}
