package enforce

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPolicyRequestBodyFindReplace: the upstream gets the body with every match replaced, in
// order, and its new Content-Length; a body over MaxFindReplaceBody is refused 413
// ERR_NGROK_3903 before anything reaches the upstream, an encoded one 415, and a pattern whose
// interpolation is not a regular expression 503 ERR_NGROK_3901.
func TestPolicyRequestBodyFindReplace(t *testing.T) {
	var reached atomic.Int32
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Header.Get("Content-Length")+" "+string(b))
	})
	h := stageWith(t, `{"on_http_request":[{"actions":[{"type":"request-body-find-replace","config":{"replacements":[
	  {"from":"\"api_key\":\\s*\"[^\"]*\"","to":"\"api_key\": \"[REDACTED]\""},
	  {"from":"([a-z]+)@example\\.com","to":"$1@${req.headers['x-domain'][0]}"},
	  {"from":"REDACTED"}]}}]}]}`, PolicyOptions{}, up)
	post := func(body string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "https://a.test/", strings.NewReader(body))
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	body := `{"api_key": "sk-abc123", "user": "john@example.com"}`
	want := `{"api_key": "[]", "user": "john@redacted.test"}`
	if w := post(body, map[string]string{"X-Domain": "redacted.test"}); w.Code != 200 || w.Body.String() != strconv.Itoa(len(want))+" "+want {
		t.Errorf("rewritten: %d %q", w.Code, w.Body)
	}
	before := reached.Load()
	if w := post(strings.Repeat("x", MaxFindReplaceBody+1), map[string]string{"X-Domain": "d"}); w.Code != 413 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3903" {
		t.Errorf("a body over the bound: %d %v", w.Code, w.Header())
	}
	if w := post("x", map[string]string{"X-Domain": "d", "Content-Encoding": "gzip"}); w.Code != 415 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3904" {
		t.Errorf("an encoded body: %d %v", w.Code, w.Header())
	}
	if w := post(body, nil); w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3904" {
		t.Errorf("a replacement whose interpolation fails: %d %v", w.Code, w.Header())
	}
	bad := stageWith(t, `{"on_http_request":[{"actions":[{"type":"request-body-find-replace","config":{"replacements":[{"from":"${req.headers['x-p'][0]}"}]}}]}]}`, PolicyOptions{}, up)
	r := httptest.NewRequest("POST", "https://a.test/", strings.NewReader("abc"))
	r.Header.Set("X-P", "(")
	w := httptest.NewRecorder()
	bad.ServeHTTP(w, r)
	if w.Code != 503 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3901" {
		t.Errorf("an interpolated pattern that is not a regular expression: %d %v", w.Code, w.Header())
	}
	if n := reached.Load() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
}

// TestPolicyResponseBodyFindReplace: the client gets the upstream's body rewritten with its new
// Content-Length, the upstream is asked for it uncompressed, a body over MaxFindReplaceBody is
// replaced by 502 ERR_NGROK_3903 (never passed on unchanged), and compress-response compresses
// the rewritten body.
func TestPolicyResponseBodyFindReplace(t *testing.T) {
	var size atomic.Int64
	size.Store(10)
	var accept atomic.Value
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept.Store(r.Header.Get("Accept-Encoding"))
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.FormatInt(size.Load()+29, 10))
		_, _ = io.WriteString(w, "ssn 123-45-6789 and card 1234")
		_, _ = io.WriteString(w, strings.Repeat("-", int(size.Load())))
	})
	h := stageWith(t, `{"on_http_response":[{"expressions":["res.status_code == 200"],"actions":[
	  {"type":"response-body-find-replace","config":{"replacements":[{"from":"\\d{3}-\\d{2}-\\d{4}","to":"[SSN ${res.status_code}]"}]}},
	  {"type":"response-body-find-replace","config":{"replacements":[{"from":"-+$"}]}}]}]}`, PolicyOptions{}, up)
	w := serve(h, "GET", "https://a.test/", map[string]string{"Accept-Encoding": "gzip"})
	if got := "ssn [SSN 200] and card 1234"; w.Code != 200 || w.Body.String() != got || w.Header().Get("Content-Length") != strconv.Itoa(len(got)) {
		t.Errorf("rewritten: %d %q %v", w.Code, w.Body, w.Header())
	}
	if accept.Load() != "identity" {
		t.Errorf("the upstream was asked for %q, want identity", accept.Load())
	}
	size.Store(MaxFindReplaceBody)
	if w := serve(h, "GET", "https://a.test/", nil); w.Code != 502 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3903" || strings.Contains(w.Body.String(), "123-45") {
		t.Errorf("a body over the bound: %d %v", w.Code, w.Header())
	}
	size.Store(2000)
	z := stageWith(t, `{"on_http_response":[{"actions":[{"type":"response-body-find-replace","config":{"replacements":[{"from":"ssn"}]}},
	  {"type":"compress-response","config":{"algorithms":["gzip"]}}]}]}`, PolicyOptions{}, up)
	if w := serve(z, "GET", "https://a.test/", map[string]string{"Accept-Encoding": "gzip"}); w.Header().Get("Content-Encoding") != "gzip" || !strings.Contains(gunzip(t, w.Body.Bytes()), " 123-45-6789 and") {
		t.Errorf("compressed after the rewrite: %v", w.Header())
	}
	enc := stageWith(t, `{"on_http_response":[{"actions":[{"type":"response-body-find-replace","config":{"replacements":[{"from":"a"}]}}]}]}`, PolicyOptions{},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Encoding", "br")
			_, _ = io.WriteString(w, "aaaa")
		}))
	if w := serve(enc, "GET", "https://a.test/", nil); w.Code != 502 || w.Header().Get("ngrok-error-code") != "ERR_NGROK_3904" {
		t.Errorf("an encoded answer: %d %v", w.Code, w.Header())
	}
}

// TestPolicySSEFindReplace: on_event_stream_message rewrites each message of an event stream
// as it arrives (the client reads the first before the upstream sends the second): the data
// field (its lines joined) and retry; other fields and responses that are not event streams are
// left alone; a message over MaxEventMessage cuts the stream.
func TestPolicySSEFindReplace(t *testing.T) {
	next := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			_, _ = io.WriteString(w, "data: secret\n\n")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: note\ndata: my secret is\r\ndata: secret\nretry: 100\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, "data: "+strings.Repeat("x", MaxEventMessage)+"\n\n")
			return
		}
		<-next
		_, _ = io.WriteString(w, ": comment\ndata: no secret here\n\n")
	})
	doc := `{"on_event_stream_message":[{"expressions":["res.status_code == 200"],"actions":[{"type":"sse-find-replace","config":{"replacements":[
	  {"field":"data","from":"secret","to":"[${req.url.path}]"},{"field":"retry","from":"\\d+","to":"5000"}]}}]}]}`
	srv := httptest.NewServer(stageWith(t, doc, PolicyOptions{}, up))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/s")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var first []string
	for {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the first message: %v (%q)", err, first)
		}
		if l == "\n" {
			break
		}
		first = append(first, l)
	}
	if got := strings.Join(first, ""); got != "event: note\ndata: my [/s] is\ndata: [/s]\nretry: 5000\n" {
		t.Errorf("the first message: %q", got)
	}
	close(next)
	rest, _ := io.ReadAll(rd)
	if string(rest) != ": comment\ndata: no [/s] here\n\n" {
		t.Errorf("the second message: %q", rest)
	}
	if w := serve(stageWith(t, doc, PolicyOptions{}, up), "GET", "https://a.test/plain", nil); w.Body.String() != "data: secret\n\n" {
		t.Errorf("a response that is no event stream: %q", w.Body)
	}
	big, err := http.Get(srv.URL + "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer big.Body.Close()
	if b, err := io.ReadAll(big.Body); err == nil || strings.Contains(string(b), "xxx") {
		t.Errorf("a message over the bound: %d bytes, %v; want the stream cut before it", len(b), err)
	}
}

// gunzip is a gzip body's text.
func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return string(out)
}
