package agents

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// connectForward is a policy whose on_tcp_connect forwards to url (with on_error's field, if
// any), and whose own HTTP phases would mark what they touch: a connection handed over must
// never meet them.
func connectForward(url, onError string) string {
	return `{"on_tcp_connect":[{"actions":[{"type":"forward-internal","config":{"url":"` + url + `"` + onError + `}}]}],` +
		`"on_http_request":[{"expressions":["req.url.path == '/teapot'"],"actions":[{"type":"custom-response","config":{"status_code":418}}]}],` +
		`"on_http_response":[{"actions":[{"type":"add-headers","config":{"headers":{"x-public":"1"}}}]}]}`
}

// TestForwardInternalOnTCPConnect: forward-internal in the on_tcp_connect phase of http and
// https endpoints and of an HTTPS edge's route hands the connection to the account's internal
// endpoint of the same protocol (http or https): every request of it is served by that
// endpoint, through its own policy, and the public policy's HTTP phases and upstream see none.
// Accounts A and B each bind http://web.internal and https://web.internal; each account's
// public endpoints reach their own. A's policy naming an internal endpoint only B has finds
// nothing: halt closes the connection unanswered, continue serves it with A's own phases and
// upstream. A tcp or tls target (another protocol, ngrok's ERR_NGROK_3502) refuses the bind
// with ERR_NGROK_301, and fails a route closed with ngrok's code for it (503 ERR_NGROK_3502,
// naming both protocols) while B's route of the same shape forwarding to its own https endpoint
// serves; the API accepts the document, which does not know its endpoint's protocol.
func TestForwardInternalOnTCPConnect(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	for _, x := range []struct {
		w   *world
		who string
	}{{wa, "internal-a"}, {wb, "internal-b"}} {
		internalBindAs(t, x.w, config.SchemeHTTP, "web.internal", x.who)
		internalBindAs(t, x.w, config.SchemeHTTPS, "web.internal", x.who+"-tls")
	}
	internalBindAs(t, wb, config.SchemeHTTPS, "only-b.internal", "only-b")

	binds := []struct {
		w      *world
		scheme config.Scheme
		name   string
		doc    string
	}{
		{wa, config.SchemeHTTP, "tc-a.edgeplane.app", connectForward("http://web.internal", "")},
		{wb, config.SchemeHTTP, "tc-b.edgeplane.app", connectForward("http://${'web' + '.internal'}", "")},
		{wa, config.SchemeHTTPS, "tcs-a.edgeplane.app", connectForward("https://web.internal", "")},
		{wb, config.SchemeHTTPS, "tcs-b.edgeplane.app", connectForward("https://web.internal", "")},
		{wa, config.SchemeHTTPS, "tcs-halt-a.edgeplane.app", connectForward("https://only-b.internal", "")},
		{wa, config.SchemeHTTPS, "tcs-cont-a.edgeplane.app", connectForward("https://only-b.internal", `,"on_error":"continue"`)},
	}
	for _, b := range binds {
		if err := publicForwardAs(t, b.w, b.scheme, b.name, b.doc); err != nil {
			t.Fatalf("bind %s: %v", b.name, err)
		}
	}

	// Each request of a connection (two on one keep-alive connection) is the internal
	// endpoint's, the public policy's on_http_request (/teapot) and on_http_response (x-public)
	// never running.
	for url, want := range map[string]string{
		"http://tc-a.edgeplane.app":   "who=internal-a user= body=",
		"http://tc-b.edgeplane.app":   "who=internal-b user= body=",
		"https://tcs-a.edgeplane.app": "who=internal-a-tls user= body=",
		"https://tcs-b.edgeplane.app": "who=internal-b-tls user= body=",
	} {
		c := wa.httpClient()
		if strings.HasPrefix(url, "https:") {
			c = wa.httpsClient()
		}
		for _, path := range []string{"/echo", "/teapot"} {
			resp, body, err := try(c, "GET", url+path, nil)
			if err != nil || resp.StatusCode != 200 || string(body) != want || resp.Header.Get("x-public") != "" {
				t.Errorf("GET %s%s: %v %v %q, want 200 %q from the internal endpoint alone", url, path, err, resp, body, want)
			}
		}
	}
	if _, _, err := try(wa.httpsClient(), "GET", "https://tcs-halt-a.edgeplane.app/echo", nil); err == nil {
		t.Error("a forward to an internal endpoint only B has (halt) answered; want the connection closed")
	}
	resp, body, err := try(wa.httpsClient(), "GET", "https://tcs-cont-a.edgeplane.app/echo", nil)
	if err != nil || resp.StatusCode != 200 || string(body) != "who= user= body=" || resp.Header.Get("x-public") != "1" {
		t.Errorf("continue: %v %v %q, want A's own upstream through A's own phases", err, resp, body)
	}

	// Another protocol's target: the bind is refused naming why; the API takes the document
	// and the route it is on fails closed.
	if err := publicForward(t, wa, "tc-tcp-a.edgeplane.app", connectForward("tcp://db.internal:5432", "")); ngrokCode(err) != "ERR_NGROK_301" || !strings.Contains(err.Error(), "different protocols") {
		t.Errorf("bind forwarding to a tcp endpoint in on_tcp_connect: %v, want ERR_NGROK_301 naming the protocols", err)
	}
	routeA := policyRoute(t, wa, "tc-route-a.example.com")
	if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": connectForward("tls://web.internal", "")}, nil); st != 200 {
		t.Fatalf("put a traffic_policy forwarding to a tls endpoint: %d", st)
	}
	routeB := policyRoute(t, wb, "tc-route-b.example.com")
	if st := wb.call("PUT", routeB+"/traffic_policy", map[string]any{"value": connectForward("https://web.internal", "")}, nil); st != 200 {
		t.Fatalf("put B's traffic_policy: %d", st)
	}
	c := wa.httpsClient()
	eventually(t, 5*time.Second, "the route forwarding to a tls endpoint fails closed with 503 ERR_NGROK_3502 naming both protocols", func() bool {
		resp, body, err := try(c, "GET", "https://tc-route-a.example.com/echo", nil)
		return err == nil && resp.StatusCode == 503 && resp.Header.Get("ngrok-error-code") == "ERR_NGROK_3502" &&
			strings.Contains(string(body), "different protocols: this endpoint is http or https, and tls://web.internal is a tls endpoint") &&
			!strings.Contains(string(body), "does not apply")
	})
	eventually(t, 5*time.Second, "B's route serves its own internal https endpoint", func() bool {
		resp, body, err := try(c, "GET", "https://tc-route-b.example.com/teapot", nil)
		return err == nil && resp.StatusCode == 200 && string(body) == "who=internal-b-tls user= body=" && resp.Header.Get("x-public") == ""
	})
	if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": connectForward("https://web.internal", "")}, nil); st != 200 {
		t.Fatalf("put traffic_policy: %d", st)
	}
	eventually(t, 5*time.Second, "the route's connections go to A's internal https endpoint", func() bool {
		resp, body, err := try(c, "GET", "https://tc-route-a.example.com/teapot", nil)
		return err == nil && resp.StatusCode == 200 && string(body) == "who=internal-a-tls user= body=" && resp.Header.Get("x-public") == ""
	})
}

// TestConnBytesPlainHTTP: conn.bytes_in and conn.bytes_out are counted on every plain HTTP
// connection (each account's binds alike): the first request of a connection reads its own
// head in and nothing out yet, the next one more of both. In on_tcp_connect they are 0: a rule
// refusing any other value lets every request of the connection through.
func TestConnBytesPlainHTTP(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	doc := `{"on_tcp_connect":[{"expressions":["conn.bytes_in != 0 || conn.bytes_out != 0"],"actions":[{"type":"deny"}]}],` +
		`"on_http_request":[{"actions":[{"type":"custom-response","config":{"status_code":200,"body":"${string(conn.bytes_in)} ${string(conn.bytes_out)}"}}]}]}`
	for name, w := range map[string]*world{"bytes-a.edgeplane.app": wa, "bytes-b.edgeplane.app": wb} {
		if err := publicForward(t, w, name, doc); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
		c := wa.httpClient()
		var lastIn, lastOut int64
		for i := range 3 {
			req, _ := http.NewRequest("GET", "http://"+name+"/bytes", nil)
			req.Header.Set("User-Agent", "bytes-test")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: request %d: %v", name, i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var in, out int64
			if n, _ := fmt.Sscanf(string(b), "%d %d", &in, &out); resp.StatusCode != 200 || n != 2 || in <= lastIn || out < lastOut ||
				(i == 0 && (in < int64(len("GET /bytes HTTP/1.1\r\n")) || out != 0)) || (i > 0 && out <= 0) {
				t.Errorf("%s: request %d: %d %q, after %d %d", name, i, resp.StatusCode, b, lastIn, lastOut)
			}
			lastIn, lastOut = in, out
		}
	}
}
