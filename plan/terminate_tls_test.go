package plan

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestTLSEdgeTerminateTLS: a TLS edge's terminate-tls applies beside its modules: it terminates
// the connections its rule matches (whatever tls_termination's terminate_at), keeps the
// module's minimum version when it is the higher one and the mutual_tls module's client
// certificates; a connection its rule does not match keeps the modules' TLS. An edge whose
// mutual_tls module and terminate-tls both ask for client certificates, and a TCP edge with
// terminate-tls, fail closed naming why. A rebuild reuses the compiled rules.
func TestTLSEdgeTerminateTLS(t *testing.T) {
	caPEM := testCA(t, 0, 0)
	doc := func(expr string, cfg map[string]any) *ep.EndpointTrafficPolicy {
		rule := map[string]any{"actions": []any{map[string]any{"type": "terminate-tls", "config": cfg}}}
		if expr != "" {
			rule["expressions"] = []string{expr}
		}
		b, _ := json.Marshal(map[string]any{"on_tcp_connect": []any{rule}})
		return &ep.EndpointTrafficPolicy{Enabled: true, Value: string(b)}
	}
	v13, upstream := "1.3", "upstream"
	s := &Snapshot{Account: "acct_1", CAs: map[string]*ep.CertificateAuthority{"ca_1": {Meta: ep.Meta{ID: "ca_1"}, CAPEM: caPEM}}}
	mtls := &ep.EndpointMutualTLS{Enabled: true, CertificateAuthorities: []*ep.Ref{{ID: "ca_1"}}}
	s.TLSEdges = []*ep.TLSEdge{
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_sni"}}, TLSTermination: &ep.EndpointTLSTermination{Enabled: true, TerminateAt: upstream, MinVersion: &v13},
			MutualTLS: mtls, TrafficPolicy: doc("conn.tls.sni == 'a.example.com'", map[string]any{"max_version": "1.3"})},
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_both"}}, MutualTLS: mtls,
			TrafficPolicy: doc("", map[string]any{"mutual_tls_verification_strategy": "require-any"})},
	}
	s.TCPEdges = []*ep.TCPEdge{{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtcp_1"}}, TrafficPolicy: doc("", map[string]any{})}}
	a := testLive.Build(s, nil)
	sni := a.TLS[0]
	if sni.Unenforced != "" || sni.Select == nil {
		t.Fatalf("the edge with a conditional terminate-tls: %q %v", sni.Unenforced, sni.Select)
	}
	client := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}
	c, err := sni.ConnTLS(Hello{Client: client, ServerName: "a.example.com"})
	if err != nil || !c.Terminate || c.Policy.MinVersion != tls.VersionTLS13 || c.Policy.MaxVersion != tls.VersionTLS13 ||
		!c.Policy.MutualTLS || len(c.Policy.roots) != 1 {
		t.Errorf("a.example.com (the rule matches): %+v %v", c, err)
	}
	c, err = sni.ConnTLS(Hello{Client: client, ServerName: "b.example.com"})
	if err != nil || c.Terminate || !c.Policy.MutualTLS || c.Policy.MinVersion != tls.VersionTLS13 {
		t.Errorf("b.example.com (no rule matches): %+v %v", c, err)
	}
	if again := testLive.Build(s, nil); again.TLS[0].Select != sni.Select {
		t.Error("a rebuild compiled the edge's terminate-tls rules again")
	}
	if e := a.TLS[1]; !strings.Contains(e.Unenforced, "mutual_tls module is on") {
		t.Errorf("mutual_tls and terminate-tls both asking for certificates: %q", e.Unenforced)
	}
	if e := a.TCP[0]; !strings.Contains(e.Unenforced, "terminate-tls") {
		t.Errorf("a TCP edge with terminate-tls: %q", e.Unenforced)
	}
}

// TestHTTPSEdgeTerminateTLS: an HTTPS edge takes the terminate-tls its routes give for its
// handshake when they give the same one (a route without any keeps working); routes giving
// different ones fail closed, naming why, and the edge's handshake keeps its modules' TLS.
func TestHTTPSEdgeTerminateTLS(t *testing.T) {
	route := func(id, doc string) *ep.HTTPSEdgeRoute {
		r := &ep.HTTPSEdgeRoute{Meta: ep.Meta{ID: id}, MatchType: ep.MatchPathPrefix, Match: "/" + id}
		if doc != "" {
			r.TrafficPolicy = &ep.EndpointTrafficPolicy{Enabled: true, Value: doc}
		}
		return r
	}
	strict := `{"on_tcp_connect":[{"actions":[{"type":"terminate-tls","config":{"min_version":"1.3"}}]}]}`
	loose := `{"on_tcp_connect":[{"actions":[{"type":"terminate-tls","config":{"max_version":"1.2"}}]}]}`
	a := testLive.Build(&Snapshot{Account: "acct_1", HTTPSEdges: []*ep.HTTPSEdge{
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_same"}}, Routes: []*ep.HTTPSEdgeRoute{route("a", strict), route("b", strict), route("c", "")}},
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edghts_diff"}}, Routes: []*ep.HTTPSEdgeRoute{route("d", strict), route("e", loose)}},
	}}, nil)
	same, diff := a.HTTPS[0], a.HTTPS[1]
	for _, r := range same.Routes {
		if r.Unenforced != "" {
			t.Errorf("route %s: %q", r.ID, r.Unenforced)
		}
	}
	if c, err := same.ConnTLS(Hello{ServerName: "x"}); err != nil || c.Policy.MinVersion != tls.VersionTLS13 {
		t.Errorf("the edge whose routes agree: %+v %v", c, err)
	}
	for _, r := range diff.Routes {
		if !strings.Contains(r.Unenforced, "give different ones") {
			t.Errorf("route %s of routes that disagree: %q", r.ID, r.Unenforced)
		}
	}
	if c, err := diff.ConnTLS(Hello{ServerName: "x"}); err != nil || diff.Select != nil || c.Policy.MinVersion != tls.VersionTLS12 {
		t.Errorf("the edge whose routes disagree: %+v %v", c, err)
	}
}

// BenchmarkConnTLS is the cost a handshake pays for terminate-tls: an edge without the action
// (the common path: nothing is evaluated), one with it in a rule without expressions, and one
// whose rule reads the server name and the client's address.
func BenchmarkConnTLS(b *testing.B) {
	doc := func(expr string) *ep.EndpointTrafficPolicy {
		rule := map[string]any{"actions": []any{map[string]any{"type": "terminate-tls"}}}
		if expr != "" {
			rule["expressions"] = []string{expr}
		}
		d, _ := json.Marshal(map[string]any{"on_tcp_connect": []any{rule}})
		return &ep.EndpointTrafficPolicy{Enabled: true, Value: string(d)}
	}
	a := NewLive().Build(&Snapshot{Account: "acct_1", TLSEdges: []*ep.TLSEdge{
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_none"}}},
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_fixed"}}, TrafficPolicy: doc("")},
		{Edge: ep.Edge{Meta: ep.Meta{ID: "edgtls_expr"}}, TrafficPolicy: doc("conn.tls.sni == 'a.example.com' && inCidrRange(conn.client_ip, '192.0.2.0/24')")},
	}}, nil)
	h := Hello{Client: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}, Server: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}, ServerName: "a.example.com"}
	for _, e := range a.TLS {
		b.Run(e.ID, func(b *testing.B) {
			for b.Loop() {
				if c, err := e.ConnTLS(h); err != nil || (e.Select != nil && !c.Terminate) {
					b.Fatal(c, err)
				}
			}
		})
	}
}
