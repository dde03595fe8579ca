package console

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/inspect"
)

// Replays: a recorded request sent again, as recorded or edited, through the same endpoint or
// edge: to this replica's own public listener (HTTP or TLS, as the original came), with the
// original Host (and, over TLS, server name), so that the endpoint's or edge's modules, routes
// and backends take it as they took the original. The replay's client is this server, so an IP
// restriction sees the listener's own address. Its answer is shown beside the original's, and
// the replay is recorded like any public request.

// Bounds of a replay.
const (
	replayTimeout    = 30 * time.Second
	maxReplayHeaders = 100
	maxReplayPath    = 8 << 10
)

// replayData is the replay page: the original and the replay's answer side by side.
type replayData struct {
	E        *inspect.Entry
	EntryURL string
	Target   string
	Edited   bool
	Sent     replayForm
	Omitted  []string
	Status   int
	Err      string
	Header   []header
	Body     []byte
	BodyCut  bool
	Duration time.Duration
	OldHead  []header
}

// hopHeaders are not sent again: they describe the original's connection and framing, which the
// replay's client sets itself.
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Transfer-Encoding": true, "Te": true, "Trailer": true, "Upgrade": true, "Content-Length": true, "Host": true}

func skipReplayHeader(name string) bool { return hopHeaders[textproto.CanonicalMIMEHeaderKey(name)] }

// replay sends an entry's request again and shows both answers.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.lookup(r, s)
	if err != nil {
		return err
	}
	if !e.IsHTTP() {
		return badRequest("Only HTTP requests can be replayed; a TLS or TCP connection's bytes are not recorded.")
	}
	sent := newReplayForm(e)
	edited := r.PostForm.Get("mode") == "edited"
	if edited {
		sent.Method, sent.Path = strings.TrimSpace(r.PostForm.Get("method")), strings.TrimSpace(r.PostForm.Get("path"))
		sent.Headers, sent.Body = r.PostForm.Get("headers"), r.PostForm.Get("body")
		sent.Omitted = nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), replayTimeout)
	defer cancel()
	req, err := h.replayRequest(ctx, e, sent)
	if err != nil {
		return err
	}
	d := replayData{E: e, EntryURL: entryURL(e), Target: target(e), Edited: edited, Sent: sent, Omitted: sent.Omitted, OldHead: headerLines(e.ResponseHeader)}
	start := time.Now()
	resp, err := h.replayClient(e).Do(req)
	d.Duration = time.Since(start)
	if err != nil {
		d.Err = err.Error()
	} else {
		defer resp.Body.Close()
		d.Status = resp.StatusCode
		d.Header = headerLines(inspect.CopyHeader(resp.Header)) // redacted as it is copied
		d.Body, _ = io.ReadAll(io.LimitReader(resp.Body, inspect.MaxBody+1))
		if len(d.Body) > inspect.MaxBody {
			d.Body, d.BodyCut = d.Body[:inspect.MaxBody], true
		}
	}
	h.render(w, r, s, "replay", http.StatusOK, d)
	return nil
}

// replayRequest builds the request a replay sends, refusing what no client could send.
func (h *Handler) replayRequest(ctx context.Context, e *inspect.Entry, f replayForm) (*http.Request, error) {
	if f.Method == "" || !validToken(f.Method) {
		return nil, badRequest("The method must be one word of letters, such as GET or POST.")
	}
	if !strings.HasPrefix(f.Path, "/") || len(f.Path) > maxReplayPath || strings.ContainsAny(f.Path, " \t\r\n") {
		return nil, badRequest("The path must start with / and hold no spaces (at most 8 KiB).")
	}
	if len(f.Body) > inspect.MaxBody {
		return nil, badRequest("The body of a replay is at most 16 KiB.")
	}
	headers := http.Header{}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(f.Headers))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || !validToken(name) || strings.ContainsAny(value, "\r\n\x00") {
			return nil, badRequest("Each header line must be \"Name: value\"; this one is not: " + line)
		}
		if n++; n > maxReplayHeaders {
			return nil, badRequest("A replay has at most 100 header lines.")
		}
		if skipReplayHeader(name) {
			continue
		}
		headers.Add(name, strings.TrimSpace(value))
	}
	scheme := "http"
	if e.Kind == inspect.KindHTTPS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, f.Method, scheme+"://"+e.Host+f.Path, strings.NewReader(f.Body))
	if err != nil {
		return nil, badRequest("The request could not be built: " + err.Error())
	}
	req.Header = headers
	if _, ok := headers["User-Agent"]; !ok {
		req.Header["User-Agent"] = nil // send none rather than Go's
	}
	if f.Body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	return req, nil
}

// validToken reports whether s is an HTTP token (a method or a header name).
func validToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// replayClient is a client that connects to this replica's public listener for the entry's
// kind, whatever the URL's host says, and verifies the listener's TLS as a public client would.
func (h *Handler) replayClient(e *inspect.Entry) *http.Client {
	addr := h.cfg.ReplayHTTP
	if e.Kind == inspect.KindHTTPS {
		addr = h.cfg.ReplayHTTPS
	}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		if addr == "" {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errListenerOff}
		}
		return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, loopback(addr))
	}
	tr := &http.Transport{
		DialContext:            dial,
		TLSClientConfig:        &tls.Config{ServerName: e.Host, RootCAs: h.cfg.ReplayRoots, MinVersion: tls.VersionTLS12},
		DisableCompression:     true,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 1 << 20,
		ResponseHeaderTimeout:  replayTimeout,
	}
	return &http.Client{Transport: tr, Timeout: replayTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type listenerOffError struct{}

func (listenerOffError) Error() string {
	return "the public listener this request came through is off on this server"
}

var errListenerOff error = listenerOffError{}

// loopback is a listener's address to dial: an unspecified host (0.0.0.0, ::) is this host.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}
