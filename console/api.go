package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// The console reads and changes objects only through the API, called in process with the
// signed-in key: the API's authentication, its account confinement, validation, rate limit,
// metrics and request log all apply to the console's calls exactly as to any client's.

// apiError is an API answer that was not a success.
type apiError struct {
	Status int    `json:"status_code"`
	Code   string `json:"error_code"`
	Msg    string `json:"msg"`
}

func (e *apiError) Error() string { return e.Msg }

// userError is a refusal of the console itself (a malformed form, an unknown entry).
type userError struct {
	status int
	msg    string
}

func (e *userError) Error() string { return e.msg }

func badRequest(msg string) error { return &userError{http.StatusBadRequest, msg} }

func notFound(msg string) error { return &userError{http.StatusNotFound, msg} }

// errorStatus is the status and message a page or data call answers an error with; anything
// that is not a refusal is logged and shown without its details.
func errorStatus(err error) (int, string) {
	var ae *apiError
	var ue *userError
	var ee *ep.Error
	switch {
	case errors.As(err, &ae):
		return ae.Status, ae.Msg
	case errors.As(err, &ue):
		return ue.status, ue.msg
	case errors.As(err, &ee):
		return ee.Status, ee.Msg
	case errors.Is(err, errNoSession):
		return http.StatusUnauthorized, "Sign in to the console first."
	}
	return http.StatusInternalServerError, "Something went wrong; the server log has the details."
}

// isUnavailable reports whether err means the store could not be asked (the key is then
// neither accepted nor refused).
func isUnavailable(err error) bool {
	status, _ := errorStatus(err)
	return status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// maxAPIAnswer bounds an answer the console reads from the API: a list page of 100 of the
// largest objects fits many times over.
const maxAPIAnswer = 32 << 20

// bufferWriter collects an in-process API answer.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (b *bufferWriter) Header() http.Header { return b.header }

func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.body.Len()+len(p) > maxAPIAnswer {
		b.over = true
		return 0, errors.New("console: API answer too large")
	}
	return b.body.Write(p)
}

// call makes an API request with the session's key and decodes a successful answer into out
// (when not nil). A refusal is an *apiError with the API's status, code and message.
func (h *Handler) call(ctx context.Context, s *session, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return err
	}
	req.RemoteAddr = "console"
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("User-Agent", "edgeplane-console")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	w := &bufferWriter{header: http.Header{}}
	h.cfg.API.ServeHTTP(w, req)
	if w.over {
		return fmt.Errorf("console: the API's answer to %s %s is larger than %d bytes", method, path, maxAPIAnswer)
	}
	if w.status >= 300 {
		ae := &apiError{}
		if json.Unmarshal(w.body.Bytes(), ae) != nil || ae.Msg == "" {
			ae.Msg = fmt.Sprintf("The API answered %s %s with status %d.", method, path, w.status)
		}
		ae.Status = w.status
		return ae
	}
	if out != nil && w.body.Len() > 0 {
		return json.Unmarshal(w.body.Bytes(), out)
	}
	return nil
}

// maxListPages bounds the pages of 100 a console page reads of one collection.
const maxListPages = 5

// listAll reads a collection's objects, newest first, following next_page_uri for up to
// maxListPages pages; more reports that there were more than it read.
func listAll[T any](ctx context.Context, h *Handler, s *session, res *ep.Resource) (items []T, more bool, err error) {
	path := res.Path + "?limit=100"
	for range maxListPages {
		var page map[string]json.RawMessage
		if err := h.call(ctx, s, "GET", path, nil, &page); err != nil {
			return nil, false, err
		}
		var batch []T
		if raw := page[res.ListKey]; raw != nil {
			if err := json.Unmarshal(raw, &batch); err != nil {
				return nil, false, err
			}
		}
		items = append(items, batch...)
		var next *string
		_ = json.Unmarshal(page["next_page_uri"], &next)
		if next == nil || *next == "" {
			return items, false, nil
		}
		u, err := url.Parse(*next)
		if err != nil {
			return items, true, nil
		}
		path = u.Path
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		// The base URL may carry a path prefix (a proxy's): the API routes from the collection's
		// path on.
		if i := strings.Index(path, res.Path+"?"); i > 0 {
			path = path[i:]
		}
	}
	return items, true, nil
}
