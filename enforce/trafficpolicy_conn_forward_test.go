package enforce

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// onlineInternal is the internal endpoints online, by account and target: what the data
// plane's directory answers forward-internal.
type onlineInternal map[string][]trafficpolicy.Target

func (o onlineInternal) ServeInternal(http.ResponseWriter, *http.Request, string, trafficpolicy.Target) bool {
	return false
}

func (o onlineInternal) InternalOnline(account string, target trafficpolicy.Target) bool {
	for _, t := range o[account] {
		if t == target {
			return true
		}
	}
	return false
}

// TestConnForwardInternal: forward-internal in on_tcp_connect hands the connection to the
// policy's account's internal tcp or tls endpoint when it is online, and no later action runs;
// an endpoint only another account has, or a URL rendering to no internal tcp endpoint, closes
// the connection (halt) or lets the next actions run (continue). Built without the internal
// endpoints or the account, or in an HTTP endpoint's on_tcp_connect, it is refused naming it.
func TestConnForwardInternal(t *testing.T) {
	db := trafficpolicy.Target{Scheme: "tcp", Host: "db.internal", Port: 5432}
	tlsDB := trafficpolicy.Target{Scheme: "tls", Host: "db.internal", Port: 443}
	online := onlineInternal{"acct_a": {db, tlsDB}, "acct_b": {{Scheme: "tcp", Host: "only-b.internal", Port: 5432}}}
	opts := PolicyOptions{Internal: online, Endpoint: &trafficpolicy.Endpoint{Account: "acct_a"}}
	fwd := func(url, onError string) string {
		return `{"type":"forward-internal","config":{"url":"` + url + `"` + onError + `}}`
	}
	client := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}
	server := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5432}
	for _, c := range []struct {
		actions string
		want    ConnVerdict
	}{
		{fwd("tcp://db.internal:5432", "") + `,{"type":"deny"}`, ConnVerdict{Allow: true, Forward: &db, Account: "acct_a"}},
		{fwd("tls://db.internal", ""), ConnVerdict{Allow: true, Forward: &tlsDB, Account: "acct_a"}},
		{fwd("tcp://db.internal:${conn.server_port}", ""), ConnVerdict{Allow: true, Forward: &db, Account: "acct_a"}},
		{fwd("tcp://only-b.internal:5432", ""), ConnVerdict{}},
		{fwd("tcp://only-b.internal:5432", `,"on_error":"continue"`), ConnVerdict{Allow: true}},
		{fwd("tcp://only-b.internal:5432", `,"on_error":"continue"`) + `,{"type":"deny"}`, ConnVerdict{}},
		{fwd("tcp://${'db.example'}.com:1", ""), ConnVerdict{}},
		{fwd("tcp://${'db.example'}.com:1", `,"on_error":"continue"`), ConnVerdict{Allow: true}},
	} {
		doc := `{"on_tcp_connect":[{"actions":[` + c.actions + `]}]}`
		cp, err := NewConnPolicyWith(mustParse(t, doc), opts)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		got := cp.Decide(client, server, "")
		if got.Allow != c.want.Allow || got.Account != c.want.Account || (got.Forward == nil) != (c.want.Forward == nil) ||
			got.Forward != nil && *got.Forward != *c.want.Forward {
			t.Errorf("%s: %+v, want %+v", doc, got, c.want)
		}
		if cp.Allow(client, server) != (c.want.Allow && c.want.Forward == nil) {
			t.Errorf("%s: Allow must refuse what Decide forwards", doc)
		}
	}
	doc := `{"on_tcp_connect":[{"actions":[` + fwd("tcp://db.internal:5432", "") + `]}]}`
	for what, o := range map[string]PolicyOptions{"internal endpoints": {Endpoint: opts.Endpoint}, "account": {Internal: online}} {
		if _, err := NewConnPolicyWith(mustParse(t, doc), o); err == nil || !strings.Contains(err.Error(), "forward-internal needs the") {
			t.Errorf("built without the %s: %v", what, err)
		}
	}
	if _, err := NewTrafficPolicyWith(mustParse(t, doc), opts); err == nil || !strings.Contains(err.Error(), "on_tcp_connect[0].actions[0]: forward-internal in on_tcp_connect is applied on TLS and TCP") {
		t.Errorf("forward-internal in an HTTP endpoint's on_tcp_connect: %v", err)
	}
}
