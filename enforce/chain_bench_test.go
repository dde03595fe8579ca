package enforce

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// body64 is the traffic benchmark upstream's answer: below compression's minimum size.
var body64 = make([]byte, 64)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark measures the chain.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkChain is the module chain in front of a route or an endpoint's final handler, built
// once as the plan builds it, on an admitted request: no modules, ip_restriction (ten allow and
// ten deny rules, the client matching the last allow rule), basic_auth (cleartext credential),
// both, the traffic benchmark's three modules (ip_restriction, request_headers adding one
// header, compression with a browser's Accept-Encoding and a 64-byte answer), alone and together,
// and a traffic_policy of the actions a policy most often holds (benchPolicy): the reference
// that policies' new actions and variables are measured against, since a policy that does not
// use them must not pay for them.
func BenchmarkChain(b *testing.B) {
	var allow, deny []string
	for i := range 10 {
		deny = append(deny, "198.51."+strconv.Itoa(i)+".0/24")
		allow = append(allow, "10."+strconv.Itoa(i)+".0.0/16")
	}
	allow[len(allow)-1] = "203.0.113.0/24"
	ip, err := NewIPFilter(allow, deny)
	if err != nil {
		b.Fatal(err)
	}
	auth, err := NewBasicAuth([]BasicCredential{{Username: "bench", CleartextPassword: "a long enough password"}})
	if err != nil {
		b.Fatal(err)
	}
	headers, err := NewRequestHeaders([]HeaderValue{{Name: "X-Bench", Value: "modules"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	parsed, err := trafficpolicy.Parse(benchPolicy)
	if err != nil {
		b.Fatal(err)
	}
	policy, err := NewTrafficPolicy(parsed)
	if err != nil {
		b.Fatal(err)
	}
	parsedConn, err := trafficpolicy.Parse(benchPolicy + benchConnRule)
	if err != nil {
		b.Fatal(err)
	}
	connPolicy, err := NewTrafficPolicy(parsedConn)
	if err != nil {
		b.Fatal(err)
	}
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write(body64)
	})
	for _, tc := range []struct {
		name  string
		chain *Chain
	}{
		{"none", nil},
		{"ip_restriction", &Chain{Conn: []ConnStage{ip}}},
		{"basic_auth", &Chain{HTTP: []Stage{auth}}},
		{"ip_restriction+basic_auth", &Chain{Conn: []ConnStage{ip}, HTTP: []Stage{auth}}},
		// The three modules of the traffic benchmark's modules path (bench/traffic.md).
		{"request_headers", &Chain{HTTP: []Stage{headers}}},
		{"compression", &Chain{HTTP: []Stage{NewCompression()}}},
		{"ip_restriction+request_headers+compression", &Chain{Conn: []ConnStage{ip}, HTTP: []Stage{headers, NewCompression()}}},
		{"traffic_policy", &Chain{HTTP: []Stage{policy}}},
		// The same with an on_tcp_connect rule, which an http endpoint runs on each request.
		{"traffic_policy+on_tcp_connect", &Chain{HTTP: []Stage{connPolicy}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := tc.chain.Handler(final)
			r, _ := http.NewRequest("GET", "https://app.example.com/", nil)
			r.RemoteAddr = "203.0.113.7:52814"
			r.SetBasicAuth("bench", "a long enough password")
			r.Header.Set("Accept-Encoding", "gzip, deflate, br")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
				if len(w.h) != 0 {
					b.Fatalf("refused: %v", w.h)
				}
			}
		})
	}
}

// benchPolicy is a traffic policy of the actions edgeplane applied before the policy's variables
// and the actions with state (set-vars, log, circuit-breaker, …) came: a refusal by method, a
// header removed when present, a header added with interpolation, and a response rule.
const benchPolicy = `
on_http_request:
  - expressions: ["req.method == 'DELETE'"]
    actions: [{type: deny}]
  - expressions: ["'x-debug' in req.headers"]
    actions: [{type: remove-headers, config: {headers: [x-debug]}}]
  - actions: [{type: add-headers, config: {headers: {x-client: "${conn.client_ip} ${req.url.path}"}}}]
on_http_response:
  - expressions: ["res.status_code >= 500"]
    actions: [{type: custom-response, config: {status_code: 503, body: unavailable}}]
`

// benchConnRule is an on_tcp_connect phase for benchPolicy: the client's network admitted.
const benchConnRule = `
on_tcp_connect:
  - actions: [{type: restrict-ips, config: {allow: [203.0.113.0/24]}}]
`

// BenchmarkCompress is the compression module on a 16 KiB compressible page, once per coding a
// client may be given (br, gzip, deflate, compress) and with none (the client accepts no coding): the
// cost of each coding relative to the others and to passing the page through, on one machine
// in one run. It reports the compressed size per response as bytes/op.
func BenchmarkCompress(b *testing.B) {
	var page []byte
	for i := 0; len(page) < 16<<10; i++ {
		page = append(page, "<li class=\"item\">entry "+strconv.Itoa(i)+" of the compressible page</li>\n"...)
	}
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		_, _ = w.Write(page)
	})
	h := NewCompression().Wrap(final)
	for _, accept := range []string{"", "br", "gzip", "deflate", "compress"} {
		b.Run("accept="+accept, func(b *testing.B) {
			r, _ := http.NewRequest("GET", "https://app.example.com/", nil)
			r.Header.Set("Accept-Encoding", accept)
			w := &countingWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.n = 0
				h.ServeHTTP(w, r)
			}
			b.ReportMetric(float64(w.n), "bytes/op")
		})
	}
}

// countingWriter is a ResponseWriter that counts the bytes written.
type countingWriter struct {
	h http.Header
	n int
}

func (c *countingWriter) Header() http.Header         { return c.h }
func (c *countingWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }
func (c *countingWriter) WriteHeader(int)             {}
