package enforce

import (
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// BenchmarkConnPolicy is the on_tcp_connect phase on an admitted connection of a tcp or tls
// endpoint or edge: a policy of the actions that phase most often holds (restrict-ips, then a
// deny whose expression is false), the reference the forward-internal action is measured
// against, alone and with a forward-internal action that finds its endpoint.
func BenchmarkConnPolicy(b *testing.B) {
	const common = `{"actions":[{"type":"restrict-ips","config":{"allow":["192.0.2.0/24","10.0.0.0/8"]}}]},` +
		`{"expressions":["conn.client_port == 1"],"actions":[{"type":"deny"}]}`
	online := onlineInternal{"acct_a": {{Scheme: "tcp", Host: "db.internal", Port: 5432}}}
	opts := PolicyOptions{Internal: online, Endpoint: &trafficpolicy.Endpoint{Account: "acct_a"}}
	for _, c := range []struct{ name, doc string }{
		{"common", `{"on_tcp_connect":[` + common + `]}`},
		{"common+forward-internal", `{"on_tcp_connect":[` + common +
			`,{"actions":[{"type":"forward-internal","config":{"url":"tcp://db.internal:5432"}}]}]}`},
	} {
		p, err := trafficpolicy.Parse(c.doc)
		if err != nil {
			b.Fatal(err)
		}
		cp, err := NewConnPolicyWith(p, opts)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cp.allow("192.0.2.7:4000", "127.0.0.1:5432", "", start)
			}
		})
	}
}
