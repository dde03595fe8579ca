package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"

	"github.com/edgeplane/edgeplane/internal/ja4"
)

// TestTrafficPolicyJA4: conn.tls.ja4_fingerprint is the fingerprint of the ClientHello the
// client sent, taken by the listener when it reads the ClientHello. Account A's https bind
// echoes it, to Go's crypto/tls client and to curl (OpenSSL), each the fingerprint of the same
// client's ClientHello read by a listener of the test's own, and to Chromium when it is
// installed; account B's edge route denies Go's
// fingerprint and lets curl's through, while A's bind keeps answering Go. A plain HTTP bind
// reads it as empty (no TLS). A connection made before B's policy read it was not fingerprinted:
// its next request fails closed, 503 ERR_NGROK_3210 naming why, while a new connection is
// denied by the fingerprint.
func TestTrafficPolicyJA4(t *testing.T) {
	wa := start(t)
	wb := wa.asAccount("tenant-b")
	echo := `{"on_http_request":[{"actions":[{"type":"custom-response","config":{"status_code":200,"body":"[${conn.tls.ja4_fingerprint}]"}}]}]}`

	_, tokenA := wa.credential()
	sessA := wa.mustConnect(tokenA)
	for name, scheme := range map[string]config.Scheme{"ja4-a.edgeplane.app": config.SchemeHTTPS, "ja4-plain-a.edgeplane.app": config.SchemeHTTP} {
		tun, err := sessA.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain(name), config.WithScheme(scheme), config.WithTrafficPolicy(echo)))
		if err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
		serveTunnel(t, tun, actionsUpstream)
	}

	// B: an edge route, without a policy at first.
	_, tokenB := wb.credential()
	wb.reserveDomain("ja4-b.example.com")
	ltun, err := wb.mustConnect(tokenB).Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "ja4-b")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	serveTunnel(t, ltun, actionsUpstream)
	group := wb.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "ja4-b"}})
	edge := wb.mustCreate("/edges/https", map[string]any{"hostports": []string{"ja4-b.example.com:443"}})
	route := "/edges/https/" + edge + "/routes/" + wb.mustCreate("/edges/https/"+edge+"/routes",
		map[string]any{"match_type": "path_prefix", "match": "/", "backend": map[string]any{"backend_id": group}})

	goClient := wa.httpsClient()
	goFP := fingerprintOf(t, func(addr string) {
		c := *goClient
		tr := goClient.Transport.(*http.Transport).Clone()
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		c.Transport = tr
		_, _, _ = try(&c, "GET", "https://ja4-a.edgeplane.app/", nil)
	})
	if !strings.HasPrefix(goFP, "t13d") || !strings.Contains(goFP, "h2_") {
		t.Fatalf("Go's fingerprint as the test's listener reads it: %q", goFP)
	}
	if resp, b, err := try(goClient, "GET", "https://ja4-a.edgeplane.app/", nil); err != nil || resp.StatusCode != 200 || string(b) != "["+goFP+"]" {
		t.Errorf("A's bind to Go's client: %v %v %q, want [%s]", err, resp, b, goFP)
	}
	if resp, b, err := try(wa.httpClient(), "GET", "http://ja4-plain-a.edgeplane.app/", nil); err != nil || resp.StatusCode != 200 || string(b) != "[]" {
		t.Errorf("A's plain HTTP bind: %v %v %q, want [] (no TLS)", err, resp, b)
	}

	// A connection to B's route made before its policy reads the fingerprint.
	// The edge reaches the plan after the API answered its create; until then the listener
	// knows no certificate for the name and the handshake fails, so the dial is retried.
	var early *tls.Conn
	eventually(t, 5*time.Second, "B's edge serves its name over TLS", func() bool {
		c, err := tls.Dial("tcp", wa.https, &tls.Config{RootCAs: wa.ca, ServerName: "ja4-b.example.com", NextProtos: []string{"http/1.1"}})
		if err != nil {
			return false
		}
		early = c
		return true
	})
	defer early.Close()
	earlyReader := bufio.NewReader(early)
	ask := func() (*http.Response, string) {
		_ = early.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(early, "GET /echo HTTP/1.1\r\nHost: ja4-b.example.com\r\n\r\n"); err != nil {
			t.Fatalf("the early connection: %v", err)
		}
		resp, err := http.ReadResponse(earlyReader, nil)
		if err != nil {
			t.Fatalf("the early connection: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	eventually(t, 5*time.Second, "B's route answers from its agent", func() bool {
		resp, _ := ask()
		return resp.StatusCode == 200 && resp.Header.Get("ngrok-error-code") == ""
	})

	deny := `{"on_http_request":[{"expressions":["conn.tls.ja4_fingerprint == '` + goFP + `'"],"actions":[{"type":"deny","config":{"status_code":403}}]},` +
		`{"actions":[{"type":"custom-response","config":{"status_code":200,"body":"b [${conn.tls.ja4_fingerprint}]"}}]}]}`
	if st := wb.call("PUT", route+"/traffic_policy", map[string]any{"value": deny}, nil); st != 200 {
		t.Fatalf("put B's policy: %d", st)
	}
	eventually(t, 5*time.Second, "B's policy denies Go's fingerprint", func() bool {
		resp, _, err := try(wb.httpsClient(), "GET", "https://ja4-b.example.com/", nil)
		return err == nil && resp.StatusCode == 403
	})
	if resp, b := ask(); resp.StatusCode != 503 || resp.Header.Get("ngrok-error-code") != "ERR_NGROK_3210" || !strings.Contains(b, "not fingerprinted") {
		t.Errorf("the connection made before the policy: %d %s %q, want 503 ERR_NGROK_3210 saying it was not fingerprinted", resp.StatusCode, resp.Header.Get("ngrok-error-code"), b)
	}
	// B's rule is B's: A's bind still answers the same client.
	if resp, b, err := try(goClient, "GET", "https://ja4-a.edgeplane.app/", nil); err != nil || resp.StatusCode != 200 || string(b) != "["+goFP+"]" {
		t.Errorf("A's bind after B's deny: %v %v %q", err, resp, b)
	}

	_, port, _ := net.SplitHostPort(wa.https)
	if browser := chromiumPath(); browser != "" {
		// Chromium (BoringSSL, with GREASE and its extensions in a random order, which JA4
		// leaves out and sorts).
		dump := func(host, addr string) string {
			h, p, _ := net.SplitHostPort(addr)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, _ := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
				"--user-data-dir="+t.TempDir(), "--ignore-certificate-errors", "--host-resolver-rules=MAP "+host+" "+h,
				"--dump-dom", "https://"+host+":"+p+"/").Output()
			return string(out)
		}
		chromeFP := fingerprintOf(t, func(addr string) { dump("ja4-a.edgeplane.app", addr) })
		if !strings.HasPrefix(chromeFP, "t13d") || !strings.Contains(chromeFP, "h2_") || chromeFP == goFP {
			t.Errorf("Chromium's fingerprint as the test's listener reads it: %q (Go's %q)", chromeFP, goFP)
		}
		t.Logf("Chromium's fingerprint: %s", chromeFP)
		if got := dump("ja4-a.edgeplane.app", wa.https); !strings.Contains(got, "["+chromeFP+"]") {
			t.Errorf("A's bind to Chromium: %q, want [%s]", got, chromeFP)
		}
	} else {
		t.Log("no Chromium: it was not fingerprinted")
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Log("no curl: it was not fingerprinted")
		return
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, wa.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(host, addr string, insecure bool) string {
		h, p, _ := net.SplitHostPort(addr)
		args := []string{"-sS", "--max-time", "10", "--resolve", host + ":" + p + ":" + h, "--cacert", caFile}
		if insecure {
			args = append(args, "-k")
		}
		out, _ := exec.Command(curl, append(args, "https://"+host+":"+p+"/")...).Output()
		return string(out)
	}
	curlFP := fingerprintOf(t, func(addr string) { run("ja4-a.edgeplane.app", addr, true) })
	t.Logf("Go's fingerprint: %s; curl's: %s", goFP, curlFP)
	if curlFP == "" || curlFP == goFP {
		t.Fatalf("curl's fingerprint as the test's listener reads it: %q (Go's %q)", curlFP, goFP)
	}
	if got := run("ja4-a.edgeplane.app", "127.0.0.1:"+port, false); got != "["+curlFP+"]" {
		t.Errorf("A's bind to curl: %q, want [%s]", got, curlFP)
	}
	if got := run("ja4-b.example.com", "127.0.0.1:"+port, false); got != "b ["+curlFP+"]" {
		t.Errorf("B's route to curl: %q, want b [%s] (only Go's fingerprint is denied)", got, curlFP)
	}
}

// chromiumPath is the Chromium the browser tests use ($EDGEPLANE_TEST_CHROMIUM, else the usual
// names), or "" when there is none.
func chromiumPath() string {
	if p := os.Getenv("EDGEPLANE_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// fingerprintOf is the JA4 fingerprint of the ClientHello that connect sends to a listener of
// the test's own at addr, which reads it with crypto/tls and ends the handshake.
func fingerprintOf(t *testing.T, connect func(addr string)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- ""
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tls.Server(c, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			got <- ja4.Fingerprint(h)
			return nil, errors.New("read")
		}}).Handshake()
		select {
		case got <- "":
		default:
		}
	}()
	connect(ln.Addr().String())
	select {
	case fp := <-got:
		return fp
	case <-time.After(15 * time.Second):
		t.Fatal("no ClientHello reached the test's listener")
		return ""
	}
}
