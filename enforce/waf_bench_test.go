package enforce

import (
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// BenchmarkChainOWASP is BenchmarkChain's traffic_policy case (benchPolicy, the reference) next
// to the same policy with owasp-crs-request in front, then with owasp-crs-response inspecting
// the 64-byte answer too, on a clean browser request: the cost of running the Core Rule Set per
// request, as a ratio to the policy without it in the same run, in time and in CPU time
// (cpu-ns/op, steadier on a shared machine). The engine is compiled before the timer starts
// (BenchmarkWAFCompile measures that).
func BenchmarkChainOWASP(b *testing.B) {
	waf := NewWAF()
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(200)
		_, _ = w.Write(body64)
	})
	withRequest := strings.Replace(benchPolicy, "on_http_request:\n", "on_http_request:\n  - actions: [{type: owasp-crs-request}]\n", 1)
	withBoth := strings.Replace(withRequest, "on_http_response:\n", "on_http_response:\n  - actions: [{type: owasp-crs-response, config: {process_body: true}}]\n", 1)
	for _, tc := range []struct{ name, doc string }{
		{"reference", benchPolicy},
		{"owasp-crs-request", withRequest},
		{"owasp-crs-request+response", withBoth},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := trafficpolicy.Parse(tc.doc)
			if err != nil {
				b.Fatal(err)
			}
			st, err := NewTrafficPolicyWith(p, PolicyOptions{WAF: waf})
			if err != nil {
				b.Fatal(err)
			}
			h := (&Chain{HTTP: []Stage{st}}).Handler(final)
			r, _ := http.NewRequest("GET", "https://app.example.com/products?q="+url.QueryEscape("blue shoes")+"&page=2", nil)
			r.RemoteAddr = "203.0.113.7:52814"
			r.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")
			r.Header.Set("Accept", "text/html,application/xhtml+xml")
			r.Header.Set("Accept-Encoding", "gzip, deflate, br")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.h.Get("ngrok-error-code") != "" {
					b.Fatalf("refused: %v", w.h)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkWAFCompile is the cost of compiling the Core Rule Set, paid once per data plane (the
// WAF shared by its stages) when the first policy with an owasp-crs action is built.
func BenchmarkWAFCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewWAF().engine(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's CPU time so far (user and system), in nanoseconds: on a machine
// shared with other work, the CPU a request costs is steadier than the time it takes.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
