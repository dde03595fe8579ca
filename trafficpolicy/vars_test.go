package trafficpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestVariables: every variable edgeplane fills has the value ngrok documents for a request,
// its response and its endpoint, computed only when read.
func TestVariables(t *testing.T) {
	r := httptest.NewRequest("POST", "https://app.example.com:8443/a%20b/c?q=1&q=2&x=y", strings.NewReader("body"))
	r.RemoteAddr = "[::ffff:192.0.2.9]:4567"
	r.Header.Set("Cookie", "session=abc; theme=dark; session=def")
	r.Header.Set("Content-Type", "application/json; charset=UTF-8")
	r.Header.Set("Content-Encoding", "gzip, br")
	r.Header.Set("User-Agent", "curl/8.5")
	r.Header.Set("Location", "/there")
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "client", Organization: []string{"Acme"}},
		Issuer: pkix.Name{CommonName: "CA"}, SerialNumber: big.NewInt(255), DNSNames: []string{"c.example.com"},
		NotAfter: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, CipherSuite: tls.TLS_AES_128_GCM_SHA256, ServerName: "app.example.com",
		NegotiatedProtocol: "h2", PeerCertificates: []*x509.Certificate{cert}}
	vars := RequestVars(ConnVars(r.RemoteAddr, "10.0.0.1:443"), r, "https")
	SetEndpoint(vars, &Endpoint{ID: "tn_1", URL: "https://app.example.com", Protocol: "https", Host: "app.example.com", Port: 443})
	start := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	SetConnStart(vars, start)
	if len(vars) != 1 {
		t.Errorf("variables computed before they were read: %v", vars)
	}
	ResponseVars(vars, 302, http.Header{"Set-Cookie": {"id=1; Path=/; Max-Age=60; Secure; HttpOnly; SameSite=Lax"},
		"Content-Type": {"text/html; charset=utf-8"}, "Location": {"/next"}, "Content-Length": {"12"}})
	p, err := Parse(`{"on_http_response":[{"expressions":[
	  "conn.client_ip == '192.0.2.9' && conn.client_port == 4567 && conn.server_ip == '10.0.0.1' && conn.server_port == 443",
	  "conn.ts.start == timestamp('2025-05-01T00:00:00Z')",
	  "conn.tls.version == 'TLS 1.3' && conn.tls.cipher_suite == 'TLS_AES_128_GCM_SHA256' && conn.tls.sni == 'app.example.com' && conn.tls.negotiated_alpn == 'h2' && !conn.tls.session_resumed",
	  "conn.tls.client.subject.common_name == 'client' && conn.tls.client.subject.organization == ['Acme'] && conn.tls.client.issuer.common_name == 'CA' && conn.tls.client.serial_number == 'ff' && conn.tls.client.san.dns_names == ['c.example.com'] && conn.tls.client.validity.not_after == timestamp('2030-01-01T00:00:00Z')",
	  "endpoint.id == 'tn_1' && endpoint.url == 'https://app.example.com' && endpoint.protocol == 'https' && endpoint.host == 'app.example.com' && endpoint.port == 443 && endpoint.addr == 'app.example.com:443'",
	  "req.method == 'POST' && req.url == 'https://app.example.com:8443/a%20b/c?q=1&q=2&x=y' && req.url.path == '/a b/c' && req.url.raw_path == '/a%20b/c' && req.url.port == 8443 && req.url.uri == '/a%20b/c?q=1&q=2&x=y'",
	  "req.url.query_params['q'] == ['1', '2'] && req.url.host == 'app.example.com' && req.url.authority == 'app.example.com:8443' && req.version == 'HTTP/1.1'",
	  "req.cookies['session'][0].value == 'abc' && req.cookies['session'][1].value == 'def' && getReqCookie('theme').value == 'dark' && hasReqCookie('theme') && !hasReqCookie('x')",
	  "req.content_type == 'application/json' && req.content_type.parameters['charset'] == 'UTF-8' && req.content_encoding == ['gzip', 'br'] && req.user_agent == 'curl/8.5' && req.location == '/there'",
	  "getReqHeader('User-Agent') == ['curl/8.5'] && hasReqHeader('USER-AGENT') && getReqHeader('X-None') == [] && getQueryParam('q') == ['1', '2'] && hasQueryParam('x')",
	  "res.status_code == 302 && res.location == '/next' && res.content_length == 12 && res.content_type == 'text/html' && res.content_type.parameters.charset == 'utf-8'",
	  "res.cookies['id'][0].max_age == duration('60s') && res.cookies['id'][0].secure && res.cookies['id'][0].http_only && res.cookies['id'][0].same_site == 'Lax' && getResHeader('location') == ['/next'] && hasResCookie('id')",
	  "timestamp(time.now) > timestamp('2024-01-01T00:00:00Z') && req.ts.header_received > timestamp('2024-01-01T00:00:00Z')",
	  "vars == {} && !has(vars.x)"
	],"actions":[{"type":"deny"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range p.OnHTTPResponse[0].Expressions {
		one, err := Parse(`{"on_http_response":[{"expressions":[` + quote(e) + `],"actions":[{"type":"deny"}]}]}`)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if ok, err := one.OnHTTPResponse[0].Match(vars); !ok || err != nil {
			t.Errorf("%s: %v %v", e, ok, err)
		}
	}
	if _, ok := vars["req.cookies"]; !ok {
		t.Error("a variable read is not kept")
	}
}

// TestMacros: ngrok's macros give the values its documentation shows.
func TestMacros(t *testing.T) {
	r := httptest.NewRequest("GET", "https://a.test/", nil)
	vars := RequestVars(ConnVars("192.0.2.1:1", ""), r, "https")
	for _, e := range []string{
		"basic_auth.encode('username', 'password1') == 'Basic dXNlcm5hbWU6cGFzc3dvcmQx'",
		"hash.crc32('hello') == '3610a686' && hash.crc32('hello', 'base64') == 'NhCmhg=='",
		"hash.sha256('hello') == '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824' && 'hello'.sha256() == hash.sha256('hello')",
		"hash.sha256('hello', 'base64') == 'LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ='",
		"'hello'.md5() == '5d41402abc4b2a76b9719d911017c592' && size('hello'.sha512()) == 128 && size('hello'.xxhash64()) == 16 && size('hello'.crc64()) == 16",
		"json.decode('{\"a\":[1,2]}').a[1] == 2.0 && '{\"a\":1}'.decodeJson().a == 1.0 && '[1]'.isJson() && !'{'.isJson()",
		"json.encode({'a': 'b'}) == '{\"a\":\"b\"}' && ['a', 'b'].encodeJson() == '[\"a\",\"b\"]' && {'k': 1}.encodeJson() == '{\"k\":1}'",
		"queryString.decode('a=1&a=2&b=x')['a'] == ['1', '2'] && {'a': 'b c'}.encodeQueryString() == 'a=b+c' && 'a=1'.isQueryString()",
		"'aGVsbG8='.decodeBase64() == 'hello' && 'hello'.encodeBase64() == 'aGVsbG8=' && base64.encode(b'hi') == 'aGk='",
		"'i;md/r/$y'.escapeUrl() == 'i%3Bmd%2Fr%2F%24y' && 'i%3Bmd%2Fr%2F%24y'.unescapeUrl() == 'i;md/r/$y' && url.escape('a b') == 'a+b'",
		"'https://ngrok.com/x?y=1'.parseUrl().host == 'ngrok.com' && url.parse('https://ngrok.com').scheme == 'https' && 'https://x.y'.isURL() && !'nope'.isURL()",
		"'192.168.1.1'.isPrivateIp() && !'8.8.8.8'.isPrivateIp() && !'fd00::1'.isPrivateIp()",
		"'ÄB'.lower() == 'äb' && 'äb'.upper() == 'ÄB' && 'AbC'.lowerAscii() == 'abc' && ' x '.trim() == 'x' && 'abc'.reverse() == 'cba'",
		"'a,b'.split(',') == ['a', 'b'] && ['a', 'b'].join('-') == 'a-b' && 'abc'.charAt(1) == 'b' && 'abc'.indexOf('c') == 2 && 'x%sy'.format(['-']) == 'x-y'",
		"lists.range(3) == [0, 1, 2] && [3, 1, 2].sort() == [1, 2, 3] && [1, 1, 2].distinct() == [1, 2] && [[1], [2]].flatten() == [1, 2] && [1, 2, 3].slice(1, 2) == [2]",
		"rand.int(5, 5) == 5 && rand.double() >= 0.0 && rand.double() < 1.0 && rand.int() <= 1",
		"inCidrRange('10.1.2.3', '10.0.0.0/8') && strings.quote('a') == '\"a\"'",
	} {
		p, err := Parse(`{"on_http_request":[{"expressions":[` + quote(e) + `],"actions":[{"type":"deny"}]}]}`)
		if err != nil {
			t.Errorf("%s: %v", e, err)
			continue
		}
		if ok, err := p.OnHTTPRequest[0].Match(vars); !ok || err != nil {
			t.Errorf("%s: %v %v", e, ok, err)
		}
	}
	// A value outside a macro's domain is an error, never a silent value.
	for _, e := range []string{"size(lists.range(20000)) > 0", "rand.int(5, 1) == 1", "'%%%'.unescapeUrl() == ''", "hash.md5('a', 'b64') == ''", "json.decode('{') == {}"} {
		p, err := Parse(`{"on_http_request":[{"expressions":[` + quote(e) + `],"actions":[{"type":"deny"}]}]}`)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if _, err := p.OnHTTPRequest[0].Match(vars); err == nil {
			t.Errorf("%s: no error", e)
		}
	}
}

// quote is s as a JSON string.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// TestUserAgentVariables: req.user_agent's parts are the parsed first User-Agent header (a
// browser, a phone, a tablet, a bot with its URL, no header at all), and the header is parsed
// once however many parts a policy reads, and again after the request changed.
func TestUserAgentVariables(t *testing.T) {
	for ua, want := range map[string]string{
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91":       "req.user_agent.name == 'Edge' && req.user_agent.version == '120.0.2210.91' && req.user_agent.os == 'Windows' && req.user_agent.os_version == '10.0' && req.user_agent.is_desktop && !req.user_agent.is_mobile && !req.user_agent.is_bot && req.user_agent == '" + "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91" + "'",
		"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1": "req.user_agent.name == 'Safari' && req.user_agent.os == 'iOS' && req.user_agent.device == 'iPhone' && req.user_agent.is_mobile && !req.user_agent.is_tablet && !req.user_agent.is_desktop",
		"Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1":          "req.user_agent.device == 'iPad' && req.user_agent.is_tablet && !req.user_agent.is_mobile",
		"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)":                                                                "req.user_agent.name == 'Googlebot' && req.user_agent.is_bot && req.user_agent.url == 'http://www.google.com/bot.html'",
		"": "req.user_agent.name == '' && req.user_agent.version == '' && !req.user_agent.is_bot && !req.user_agent.is_desktop",
	} {
		r := httptest.NewRequest("GET", "https://a.test/", nil)
		if ua != "" {
			r.Header.Set("User-Agent", ua)
		}
		vars := RequestVars(ConnVars("192.0.2.1:1", ""), r, "https")
		p, err := Parse(`{"on_http_request":[{"expressions":[` + quote(want) + `],"actions":[{"type":"deny"}]}]}`)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if err := p.Unavailable(); err != nil {
			t.Errorf("%s: %v", want, err)
		}
		if ok, err := p.OnHTTPRequest[0].Match(vars); !ok || err != nil {
			t.Errorf("%q: %s: %v %v", ua, want, ok, err)
		}
		if src := vars[srcKey].(*sources); ua != "" && (src.parts == nil || src.parts.ua == nil || src.parts.ua.String != ua) {
			t.Errorf("%q: the parse is not kept", ua)
		}
		r2 := httptest.NewRequest("GET", "https://a.test/", nil)
		r2.Header.Set("User-Agent", "curl/8.5.0")
		RequestVars(vars, r2, "https")
		delete(vars, "req.user_agent.name")
		if v, _ := Lookup(vars, "req.user_agent.name"); v != "curl" {
			t.Errorf("%q: after the request changed, name %v", ua, v)
		}
	}
}

// servedBy is a listener's record of the certificate it presents for one name.
type servedBy map[string]*x509.Certificate

func (s servedBy) ServedCertificate(name string) *x509.Certificate { return s[name] }

func (servedBy) Bytes() (int64, int64, bool) { return 0, 0, false }

func (servedBy) JA4() (string, bool) { return "", false }

// TestServerCertificateVariables: conn.tls.server.* are the parts of the certificate the
// listener presents for the connection's server name, looked up once per request; without TLS,
// or a name served no certificate, they are empty.
func TestServerCertificateVariables(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "app.example.com", Organization: []string{"Edge"}},
		Issuer: pkix.Name{CommonName: "Edge CA", Country: []string{"NZ"}}, SerialNumber: big.NewInt(4096),
		DNSNames: []string{"app.example.com", "*.example.com"}, SignatureAlgorithm: x509.ECDSAWithSHA256,
		NotBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)}
	lookups := 0
	served := countingServed{servedBy{"app.example.com": cert}, &lookups}
	r := httptest.NewRequest("GET", "https://app.example.com/", nil)
	r.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, ServerName: "app.example.com"}
	vars := RequestVars(ConnVars("192.0.2.1:1", "10.0.0.1:443"), r, "https")
	SetConn(vars, served)
	expr := "conn.tls.server.subject.common_name == 'app.example.com' && conn.tls.server.subject.organization == ['Edge'] && " +
		"conn.tls.server.issuer.common_name == 'Edge CA' && conn.tls.server.issuer.country == ['NZ'] && conn.tls.server.serial_number == '1000' && " +
		"conn.tls.server.san.dns_names == ['app.example.com', '*.example.com'] && conn.tls.server.san == 'app.example.com,*.example.com' && " +
		"conn.tls.server.signature_algorithm == 'ECDSA-SHA256' && conn.tls.server.validity.not_after == timestamp('2026-04-01T00:00:00Z') && " +
		"conn.tls.server.validity.not_before < conn.tls.server.validity.not_after && conn.tls.client.subject == ''"
	p, err := Parse(`{"on_http_request":[{"expressions":[` + quote(expr) + `],"actions":[{"type":"deny"}]}]}`)
	if err != nil || p.Unavailable() != nil {
		t.Fatalf("%v %v", err, p.Unavailable())
	}
	if ok, err := p.OnHTTPRequest[0].Match(vars); !ok || err != nil {
		t.Errorf("%v %v", ok, err)
	}
	if lookups != 1 {
		t.Errorf("the certificate was looked up %d times, want once", lookups)
	}
	empty, _ := Parse(`{"on_http_request":[{"expressions":["conn.tls.server.subject == '' && conn.tls.server.san.dns_names == [] && conn.tls.server.validity.not_after == timestamp('0001-01-01T00:00:00Z')"],"actions":[{"type":"deny"}]}]}`)
	plain := RequestVars(ConnVars("192.0.2.1:1", "10.0.0.1:80"), httptest.NewRequest("GET", "http://app.example.com/", nil), "http")
	SetConn(plain, served)
	other := httptest.NewRequest("GET", "https://other.example.com/", nil)
	other.TLS = &tls.ConnectionState{ServerName: "other.example.com"}
	unserved := RequestVars(ConnVars("192.0.2.1:1", "10.0.0.1:443"), other, "https")
	SetConn(unserved, served)
	for what, v := range map[string]map[string]any{"plain http": plain, "a name with no certificate": unserved} {
		if ok, err := empty.OnHTTPRequest[0].Match(v); !ok || err != nil {
			t.Errorf("%s: %v %v", what, ok, err)
		}
	}
}

// countingServed counts the lookups of a servedBy.
type countingServed struct {
	servedBy
	n *int
}

func (c countingServed) ServedCertificate(name string) *x509.Certificate {
	*c.n++
	return c.servedBy.ServedCertificate(name)
}

// counted is a connection whose listener counted 300 bytes in and 4000 out.
type counted struct{ servedBy }

func (counted) Bytes() (int64, int64, bool) { return 300, 4000, true }

// TestConnBytesVariables: conn.bytes_in and conn.bytes_out are the listener's counts; on a
// connection it does not count (or with no connection at all) reading them is an error naming
// why, never 0; in on_tcp_connect they are 0; a document reading them says so
// (Reads("conn.bytes")) for the listener.
func TestConnBytesVariables(t *testing.T) {
	p, err := Parse(`{"on_http_request":[{"expressions":["conn.bytes_in == 300 && conn.bytes_out > 1000"],"actions":[{"type":"deny"}]}]}`)
	if err != nil || p.Unavailable() != nil || !p.Reads("conn.bytes") {
		t.Fatalf("%v %v reads %v", err, p.Unavailable(), p.Reads("conn.bytes"))
	}
	r := httptest.NewRequest("GET", "https://a.test/", nil)
	vars := RequestVars(ConnVars("192.0.2.1:1", ""), r, "https")
	SetConn(vars, counted{})
	if ok, err := p.OnHTTPRequest[0].Match(vars); !ok || err != nil {
		t.Errorf("counted: %v %v", ok, err)
	}
	for what, c := range map[string]Conn{"not counted": servedBy{}, "no connection": nil} {
		vars := RequestVars(ConnVars("192.0.2.1:1", ""), r, "https")
		if c != nil {
			SetConn(vars, c)
		}
		if _, err := p.OnHTTPRequest[0].Match(vars); err == nil || !strings.Contains(err.Error(), "conn.bytes_in: this connection's bytes are not counted") {
			t.Errorf("%s: %v", what, err)
		}
	}
	// In on_tcp_connect, which runs as the connection is established, they are 0 each way, with
	// or without a counting listener.
	atConnect, err := Parse(`{"on_tcp_connect":[{"expressions":["conn.bytes_in == 0 && conn.bytes_out == 0"],"actions":[{"type":"deny"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]Conn{"counted": counted{}, "not counted": servedBy{}, "no connection": nil} {
		vars := ConnVars("192.0.2.1:1", "127.0.0.1:80")
		AtConnect(vars)
		if c != nil {
			SetConn(vars, c)
		}
		if ok, err := atConnect.OnTCPConnect[0].Match(vars); !ok || err != nil {
			t.Errorf("on_tcp_connect, %s: %v %v, want 0 and 0", what, ok, err)
		}
	}
	other, _ := Parse(`{"on_http_request":[{"expressions":["conn.client_ip == '1.2.3.4'"],"actions":[{"type":"deny"}]}]}`)
	if other.Reads("conn.bytes") {
		t.Error("a document not reading the counts says it does")
	}
}

// fingerprinted is a connection whose listener fingerprinted its ClientHello (fp), or a
// connection without TLS (fp empty).
type fingerprinted struct {
	servedBy
	fp string
}

func (f fingerprinted) JA4() (string, bool) { return f.fp, true }

// TestJA4Variable: conn.tls.ja4_fingerprint is the listener's fingerprint of the ClientHello,
// empty without TLS; on a connection it did not fingerprint (or with no connection at all)
// reading it is an error naming why, never empty, and a document reading it says so
// (Reads("conn.tls.ja4_fingerprint")) for the listener.
func TestJA4Variable(t *testing.T) {
	const fp = "t13d1516h2_8daaf6152771_e5627efa2ab1"
	p, err := Parse(`{"on_http_request":[{"expressions":["conn.tls.ja4_fingerprint == '` + fp + `'"],"actions":[{"type":"deny"}]}]}`)
	if err != nil || p.Unavailable() != nil || !p.Reads("conn.tls.ja4_fingerprint") {
		t.Fatalf("%v %v reads %v", err, p.Unavailable(), p.Reads("conn.tls.ja4_fingerprint"))
	}
	r := httptest.NewRequest("GET", "https://a.test/", nil)
	for what, c := range map[string]struct {
		conn  Conn
		match bool
	}{"fingerprinted": {fingerprinted{fp: fp}, true}, "another client": {fingerprinted{fp: "t12i0000000_x_y"}, false},
		"without TLS": {fingerprinted{}, false}} {
		vars := RequestVars(ConnVars("192.0.2.1:1", ""), r, "https")
		SetConn(vars, c.conn)
		if ok, err := p.OnHTTPRequest[0].Match(vars); ok != c.match || err != nil {
			t.Errorf("%s: %v %v", what, ok, err)
		}
	}
	for what, c := range map[string]Conn{"not fingerprinted": servedBy{}, "no connection": nil} {
		vars := RequestVars(ConnVars("192.0.2.1:1", ""), r, "https")
		if c != nil {
			SetConn(vars, c)
		}
		if _, err := p.OnHTTPRequest[0].Match(vars); err == nil || !strings.Contains(err.Error(), "conn.tls.ja4_fingerprint: this connection's ClientHello was not fingerprinted") {
			t.Errorf("%s: %v", what, err)
		}
	}
	if other, _ := Parse(`{"on_http_request":[{"expressions":["conn.tls.sni == 'a'"],"actions":[{"type":"deny"}]}]}`); other.Reads("conn.tls.ja4_fingerprint") {
		t.Error("a document not reading the fingerprint says it does")
	}
}
