package tunnel

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// bindOptions is the options of a Bind with a traffic policy (and the extra fields given).
func bindOptions(t *testing.T, doc string, extra map[string]any) (bindOpts, json.RawMessage) {
	t.Helper()
	fields := map[string]any{"TrafficPolicy": doc}
	for k, v := range extra {
		fields[k] = v
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	var o bindOpts
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	return o, raw
}

// TestTrafficPolicyBindOption: on http and https binds the policy is an HTTP stage; on tcp and
// tls binds its on_tcp_connect rules become the tunnel's connection policy, run (after the IP
// restriction) on a real connection's addresses; HTTP phases there, and documents that are not
// policies, refuse the bind with ERR_NGROK_301 naming why.
func TestTrafficPolicyBindOption(t *testing.T) {
	deny := `{"on_tcp_connect":[{"expressions":["conn.server_port > 0"],"actions":[{"type":"deny"}]}]}`
	for _, proto := range []string{"http", "https"} {
		o, raw := bindOptions(t, deny, nil)
		chain, policy, berr := o.chain(proto, raw)
		if berr != nil || policy != nil || chain == nil || len(chain.HTTP) != 1 || chain.HTTP[0].Name() != "traffic_policy" {
			t.Errorf("%s: chain %+v policy %v error %v, want one traffic_policy stage", proto, chain, policy, berr)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		what  string
		proto string
		doc   string
		extra map[string]any
		want  bool
	}{
		{"deny by expression", "tcp", deny, nil, false},
		{"deny by expression", "tls", deny, nil, false},
		{"a false expression", "tcp", `{"on_tcp_connect":[{"expressions":["conn.client_ip == '192.0.2.1'"],"actions":[{"type":"deny"}]}]}`, nil, true},
		{"restrict-ips admitting", "tls", "on_tcp_connect:\n  - actions:\n      - type: restrict-ips\n        config: {allow: [127.0.0.1/32]}\n", nil, true},
		{"restrict-ips refusing", "tcp", `{"on_tcp_connect":[{"actions":[{"type":"restrict-ips","config":{"deny":["127.0.0.0/8"]}}]}]}`, nil, false},
		{"ip_restriction before an admitting policy", "tcp", `{"on_tcp_connect":[]}`,
			map[string]any{"IPRestriction": map[string]any{"deny_cidrs": []string{"127.0.0.0/8"}}}, false},
	} {
		o, raw := bindOptions(t, c.doc, c.extra)
		chain, policy, berr := o.chain(c.proto, raw)
		if berr != nil || policy == nil {
			t.Errorf("%s on %s: policy %v error %v", c.what, c.proto, policy, berr)
			continue
		}
		if chain != nil && len(chain.HTTP) != 0 {
			t.Errorf("%s on %s: HTTP stages %v", c.what, c.proto, chain.HTTP)
		}
		tun := &Tunnel{proto: c.proto, chain: chain, policy: policy}
		if got := tun.AllowConn(conn, nil); got != c.want {
			t.Errorf("%s on %s: admitted %v, want %v", c.what, c.proto, got, c.want)
		}
	}

	for _, c := range []struct{ proto, doc, want string }{
		{"tcp", `{"on_http_request":[{"actions":[{"type":"deny"}]}]}`, "on_http_request does not apply to TLS and TCP endpoints"},
		{"tls", `{"on_http_response":[{"actions":[{"type":"deny"}]}]}`, "on_http_response does not apply to TLS and TCP endpoints"},
		{"tcp", `{"on_tcp_connect":[{"actions":[{"type":"custom-response","config":{"status_code":200}}]}]}`, "custom-response"},
		{"tls", `{"on_tcp_connects":[]}`, `"on_tcp_connects" is not a traffic policy phase`},
		// A document estimated above what an account's whole plan may hold: 10,000 expressions.
		{"https", `{"on_http_request":[{"expressions":["1>0"` + strings.Repeat(`,"1>0"`, 9999) + `],"actions":[{"type":"deny"}]}]}`, "MaxAccountPolicyCost"},
	} {
		o, raw := bindOptions(t, c.doc, nil)
		_, _, berr := o.chain(c.proto, raw)
		if berr == nil || berr.code != ep.AgentCodeBadBind || !strings.Contains(berr.msg, "traffic_policy: ") || !strings.Contains(berr.msg, c.want) {
			t.Errorf("%s on %s: %+v, want %d naming %q", c.doc, c.proto, berr, ep.AgentCodeBadBind, c.want)
		}
	}
	var o bindOpts
	if _, _, berr := o.chain("tcp", json.RawMessage(`{"TrafficPolicy":{"on_tcp_connect":[]}}`)); berr == nil || berr.code != ep.AgentCodeBadBind || !strings.Contains(berr.msg, "not a string") {
		t.Errorf("a policy that is not a string: %+v", berr)
	}
}
