package agents

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

// internalBind binds, in w's account, an internal http endpoint on name whose own traffic
// policy tells the upstream (actionsUpstream) who served it, in X-Who.
func internalBind(t *testing.T, w *world, name, who string) {
	t.Helper()
	internalBindAs(t, w, config.SchemeHTTP, name, who)
}

// internalBindAs is internalBind of an internal endpoint of scheme (http or https).
func internalBindAs(t *testing.T, w *world, scheme config.Scheme, name, who string) {
	t.Helper()
	_, token := w.credential()
	tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name),
		config.WithScheme(scheme), config.WithBindings("internal"),
		config.WithTrafficPolicy(`{"on_http_request":[{"actions":[{"type":"add-headers","config":{"headers":{"x-who":"`+who+`"}}}]}]}`)))
	if err != nil {
		t.Fatalf("internal bind %s: %v", name, err)
	}
	if tun.URL() != string(scheme)+"://"+name {
		t.Errorf("internal bind's URL: %q", tun.URL())
	}
	serveTunnel(t, tun, actionsUpstream)
}

// publicForward binds, in w's account, a public http endpoint on name whose policy is doc.
func publicForward(t *testing.T, w *world, name, doc string) error {
	t.Helper()
	return publicForwardAs(t, w, config.SchemeHTTP, name, doc)
}

// publicForwardAs is publicForward of a public endpoint of scheme (http or https).
func publicForwardAs(t *testing.T, w *world, scheme config.Scheme, name, doc string) error {
	t.Helper()
	_, token := w.credential()
	tun, err := w.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name),
		config.WithScheme(scheme), config.WithTrafficPolicy(doc)))
	if err != nil {
		return err
	}
	serveTunnel(t, tun, actionsUpstream)
	return nil
}

// TestForwardInternal: two accounts each bind an internal endpoint of the same name
// (svc.internal), which the public listeners never serve; each account's public endpoint and
// edge route forward to it with forward-internal and get their own account's endpoint, its own
// policy applied. An internal endpoint only another account has is offline to the policy:
// halt answers 404 ERR_NGROK_3200, continue reaches the policy's own upstream. A URL that is not
// an internal endpoint's is refused by the API (400 ERR_NGROK_215 naming the field) and as an
// agent's bind (ERR_NGROK_301), and the internal binding on a public name with ngrok's
// ERR_NGROK_9029.
func TestForwardInternal(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	internalBind(t, wa, "svc.internal", "internal-a")
	internalBind(t, wb, "svc.internal", "internal-b")
	internalBind(t, wb, "only-b.internal", "only-b")

	fwd := func(url, onError string) string {
		return `{"on_http_request":[{"expressions":["req.url.path != '/own'"],"actions":[{"type":"forward-internal","config":{"url":"` + url + `"` + onError + `}}]}]}`
	}
	for name, x := range map[string]struct {
		w   *world
		doc string
	}{
		"fwd-a.edgeplane.app":  {wa, fwd("http://svc.internal", "")},
		"fwd-b.edgeplane.app":  {wb, fwd("http://${'svc' + '.internal'}", "")},
		"halt-a.edgeplane.app": {wa, fwd("http://only-b.internal", "")},
		"cont-a.edgeplane.app": {wa, fwd("http://only-b.internal", `,"on_error":"continue"`)},
	} {
		if err := publicForward(t, x.w, name, x.doc); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
	}
	hc := wa.httpClient()
	for url, want := range map[string]string{
		"http://fwd-a.edgeplane.app/echo": "who=internal-a user= body=",
		"http://fwd-b.edgeplane.app/echo": "who=internal-b user= body=",
		"http://fwd-a.edgeplane.app/own":  "who= user= body=", // the rule does not match: the public endpoint's own upstream
		"http://cont-a.edgeplane.app/x":   "who= user= body=", // B's endpoint is not A's: continue goes on to A's upstream
	} {
		if st, body, _ := get(t, hc, url); st != 200 || body != want {
			t.Errorf("GET %s: %d %q, want 200 %q", url, st, body, want)
		}
	}
	if st, body, h := get(t, hc, "http://halt-a.edgeplane.app/x"); st != 404 || h.Get("ngrok-error-code") != "ERR_NGROK_3200" || !strings.Contains(body, "offline") {
		t.Errorf("forward to another account's internal endpoint: %d %s %q, want 404 ERR_NGROK_3200", st, h.Get("ngrok-error-code"), body)
	}
	// An internal endpoint forwarding to itself ends after 8 hops; a URL rendering to a public
	// name fails the action: both 404 ERR_NGROK_3200 naming why.
	_, token := wa.credential()
	loop, err := wa.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("loop.internal"),
		config.WithScheme(config.SchemeHTTP), config.WithTrafficPolicy(fwd("http://loop.internal", ""))))
	if err != nil {
		t.Fatalf("bind loop.internal: %v", err)
	}
	serveTunnel(t, loop, actionsUpstream)
	for name, doc := range map[string]string{"loop-a.edgeplane.app": fwd("http://loop.internal", ""), "public-a.edgeplane.app": fwd("http://${'x' + '.example.com'}", "")} {
		if err := publicForward(t, wa, name, doc); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
	}
	for url, why := range map[string]string{"http://loop-a.edgeplane.app/x": "forwarded through 8 internal endpoints", "http://public-a.edgeplane.app/x": "does not name an internal endpoint"} {
		if st, body, h := get(t, hc, url); st != 404 || h.Get("ngrok-error-code") != "ERR_NGROK_3200" || !strings.Contains(body, why) {
			t.Errorf("GET %s: %d %s %q, want 404 ERR_NGROK_3200 naming %q", url, st, h.Get("ngrok-error-code"), body, why)
		}
	}

	// http-request reaches the account's internal endpoint, through its policy; another
	// account's is offline to it (halt: 502 ERR_NGROK_3200).
	hr := func(url string) string {
		return `{"on_http_request":[{"actions":[{"type":"http-request","config":{"url":"` + url + `/echo","on_error":"halt"}},` +
			`{"type":"add-headers","config":{"headers":{"x-user":"${actions.ngrok.http_request.res.body}"}}}]}]}`
	}
	for name, doc := range map[string]string{"hr-a.edgeplane.app": hr("http://svc.internal"), "hr-b.edgeplane.app": hr("http://only-b.internal")} {
		if err := publicForward(t, wa, name, doc); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
	}
	if st, body, _ := get(t, hc, "http://hr-a.edgeplane.app/x"); st != 200 || body != "who= user=who=internal-a user= body= body=" {
		t.Errorf("http-request to A's internal endpoint: %d %q", st, body)
	}
	if st, body, h := get(t, hc, "http://hr-b.edgeplane.app/x"); st != 502 || h.Get("ngrok-error-code") != "ERR_NGROK_3200" || !strings.Contains(body, "offline") {
		t.Errorf("http-request to B's internal endpoint from A: %d %s %q, want 502 ERR_NGROK_3200", st, h.Get("ngrok-error-code"), body)
	}

	// The public listeners never serve an internal name, whoever asks.
	for _, host := range []string{"svc.internal", "only-b.internal"} {
		if st, _, h := get(t, hc, "http://"+host+"/echo"); st != 404 || h.Get("ngrok-error-code") != "ERR_NGROK_3200" {
			t.Errorf("public request to %s: %d %s, want 404 ERR_NGROK_3200", host, st, h.Get("ngrok-error-code"))
		}
	}

	// An edge route's traffic_policy forwards to its account's internal endpoint.
	routeA := policyRoute(t, wa, "fi-a.example.com")
	if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": fwd("http://svc.internal", "")}, nil); st != 200 {
		t.Fatalf("put traffic_policy: %d", st)
	}
	c := wa.httpsClient()
	eventually(t, 5*time.Second, "the route forwards to A's internal endpoint", func() bool {
		resp, body, err := try(c, "GET", "https://fi-a.example.com/echo", nil)
		return err == nil && resp.StatusCode == 200 && string(body) == "who=internal-a user= body="
	})

	// Refusals, naming the field.
	bad := fwd("https://svc.example.com", "")
	var e apiError
	if st := wa.call("PUT", routeA+"/traffic_policy", map[string]any{"value": bad}, &e); st != 400 || e.ErrorCode != "ERR_NGROK_215" ||
		!strings.Contains(e.Msg, "on_http_request[0].actions[0].config.url:") {
		t.Errorf("PUT a forward-internal to a public URL: %d %s %q, want 400 ERR_NGROK_215 naming the url", st, e.ErrorCode, e.Msg)
	}
	if err := publicForward(t, wa, "bad-a.edgeplane.app", fwd("http://svc.internal", `,"on_error":"maybe"`)); ngrokCode(err) != "ERR_NGROK_301" || !strings.Contains(err.Error(), "config.on_error") {
		t.Errorf("bind with on_error maybe: %v, want ERR_NGROK_301 naming on_error", err)
	}
	_, err = wa.mustConnect(token).Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("pub-a.edgeplane.app"),
		config.WithScheme(config.SchemeHTTP), config.WithBindings("internal")))
	if ngrokCode(err) != "ERR_NGROK_9029" {
		t.Errorf("the internal binding on a public name: %v, want ERR_NGROK_9029", err)
	}
}
