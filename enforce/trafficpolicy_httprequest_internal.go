package enforce

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// http-request reaches the internal endpoints of the policy's account (*.internal URLs) as
// ngrok's does: the request is served in process by the endpoint's stages and agent
// (InternalEndpoints.ServeInternal, as forward-internal's are), never dialed, and its answer is
// read through a pipe under the action's timeout and body bound. An internal endpoint that is
// not online, or another account's of the same name (never reached), fails the attempt with
// ERR_NGROK_3200. Without the data plane's internal endpoints (a stage built without them) such
// a URL fails the action.

// errInternalOffline is the failure of an attempt on an internal endpoint that is not online.
var errInternalOffline = errors.New("the internal endpoint is offline")

// internalTransport sends requests for *.internal hosts to the account's internal endpoints and
// every other to base.
type internalTransport struct {
	base     http.RoundTripper
	internal InternalEndpoints
	account  string
}

// isInternal reports whether a URL's host names an internal endpoint.
func isInternal(host string) bool { return strings.HasSuffix(strings.ToLower(host), ".internal") }

func (t *internalTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isInternal(req.URL.Hostname()) {
		return t.base.RoundTrip(req)
	}
	target, err := trafficpolicy.InternalURL(trafficpolicy.OnHTTPRequest, req.URL.Scheme+"://"+req.URL.Host)
	if err != nil {
		return nil, err
	}
	in := req.Clone(req.Context())
	in.Host, in.RequestURI, in.RemoteAddr = req.URL.Host, req.URL.RequestURI(), "127.0.0.1:0"
	if ip, ok := req.Context().Value(internalClientKey{}).(string); ok {
		in.RemoteAddr = ip
	}
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil { // an aborted proxy (the reader went away) ends the answer
				pw.CloseWithError(fmt.Errorf("the internal endpoint's answer was cut off: %v", v))
			}
			w.start(http.StatusOK)
		}()
		if !t.internal.ServeInternal(w, in, t.account, target) {
			pw.CloseWithError(errInternalOffline)
			w.start(0)
			return
		}
		w.start(http.StatusOK)
		pw.Close()
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	if w.status == 0 {
		pr.Close()
		return nil, errInternalOffline
	}
	return &http.Response{StatusCode: w.status, Status: http.StatusText(w.status), Header: w.sent, Body: pr,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1, Request: req}, nil
}

// internalClientKey carries the public client's address to the requests of internal endpoints.
type internalClientKey struct{}

// pipeResponse is the ResponseWriter of a request served in process: the status and header are
// ready once written (or the handler ended), the body flows through the pipe.
type pipeResponse struct {
	header http.Header
	// sent is the header as it was when the status was fixed: the reader's copy, which the
	// handler (still writing trailers into header) never touches.
	sent   http.Header
	body   *io.PipeWriter
	status int
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeResponse) Header() http.Header { return w.header }

// start fixes the status (0: none, the endpoint was offline) once, and releases the reader.
func (w *pipeResponse) start(status int) {
	w.once.Do(func() {
		w.sent, w.status = w.header.Clone(), status
		close(w.ready)
	})
}

func (w *pipeResponse) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		return // an informational answer is not the answer
	}
	w.start(status)
}

func (w *pipeResponse) Write(b []byte) (int, error) {
	w.start(http.StatusOK)
	return w.body.Write(b)
}

// Flush does nothing: every write reaches the reader at once.
func (w *pipeResponse) Flush() {}
