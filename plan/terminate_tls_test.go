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
// terminate-tls, fail closed naming why.
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
	if e := a.TLS[1]; !strings.Contains(e.Unenforced, "mutual_tls module is on") {
		t.Errorf("mutual_tls and terminate-tls both asking for certificates: %q", e.Unenforced)
	}
	if e := a.TCP[0]; !strings.Contains(e.Unenforced, "terminate-tls") {
		t.Errorf("a TCP edge with terminate-tls: %q", e.Unenforced)
	}
}
