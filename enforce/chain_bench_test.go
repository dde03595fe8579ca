package enforce

import (
	"net/http"
	"strconv"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark measures the chain.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkChain is the module chain in front of a route or an endpoint's final handler, built
// once as the plan builds it, on an admitted request: no modules, ip_restriction (ten allow and
// ten deny rules, the client matching the last allow rule), basic_auth (cleartext credential),
// and both.
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
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	for _, tc := range []struct {
		name  string
		chain *Chain
	}{
		{"none", nil},
		{"ip_restriction", &Chain{Conn: []ConnStage{ip}}},
		{"basic_auth", &Chain{HTTP: []Stage{auth}}},
		{"ip_restriction+basic_auth", &Chain{Conn: []ConnStage{ip}, HTTP: []Stage{auth}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := tc.chain.Handler(final)
			r, _ := http.NewRequest("GET", "https://app.example.com/", nil)
			r.RemoteAddr = "203.0.113.7:52814"
			r.SetBasicAuth("bench", "a long enough password")
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
