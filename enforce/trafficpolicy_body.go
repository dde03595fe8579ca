package enforce

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// MaxFindReplaceBody bounds the body request-body-find-replace and response-body-find-replace
// hold. ngrok's actions buffer the whole body, apply the replacements and set Content-Length;
// edgeplane does the same up to this bound. A request body past it is refused with 413
// ERR_NGROK_3903 before anything reaches the upstream, and a response body past it is replaced
// by a 502 ERR_NGROK_3903 page (its status was not sent yet) and the upstream's answer is
// abandoned: neither is ever carried unchanged, which would pass on what the policy meant to
// redact.
const MaxFindReplaceBody = 1 << 20

// replacement is one replacement of a find & replace action made ready: its pattern compiled
// when the document has no interpolation in it, else compiled from its rendering.
type replacement struct {
	field, from, to *trafficpolicy.Template
	re              *regexp.Regexp
}

// compileReplacements compiles an action's replacements.
func compileReplacements(a *trafficpolicy.Action, c *trafficpolicy.FindReplaceConfig) ([]replacement, error) {
	out := make([]replacement, len(c.Replacements))
	for i, r := range c.Replacements {
		p := fmt.Sprintf("%s.config.replacements[%d]", a.Path, i)
		var err error
		rp := &out[i]
		if rp.from, err = trafficpolicy.CompileTemplate(a.Phase, r.From); err != nil {
			return nil, fmt.Errorf("%s.from: %v", p, err)
		}
		if rp.to, err = trafficpolicy.CompileTemplate(a.Phase, r.To); err != nil {
			return nil, fmt.Errorf("%s.to: %v", p, err)
		}
		if rp.field, err = trafficpolicy.CompileTemplate(a.Phase, r.Field); err != nil {
			return nil, fmt.Errorf("%s.field: %v", p, err)
		}
		if rp.from.Static() {
			rp.re = regexp.MustCompile(r.From) // Parse checked it
		}
	}
	return out, nil
}

// errBadPattern is a pattern whose interpolation did not give a regular expression.
var errBadPattern = errors.New("the interpolated pattern is not a valid regular expression")

// apply replaces every match in s; a pattern or replacement that fails to render is an error.
func (rp *replacement) apply(vars map[string]any, s []byte) ([]byte, error) {
	re := rp.re
	if re == nil {
		pattern, err := rp.from.Render(vars)
		if err != nil {
			return nil, err
		}
		if re, err = regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("%w: %q: %v", errBadPattern, pattern, err)
		}
	}
	to, err := rp.to.Render(vars)
	if err != nil {
		return nil, err
	}
	return re.ReplaceAll(s, []byte(to)), nil
}

// replaceAll applies the replacements in order.
func replaceAll(rps []replacement, vars map[string]any, b []byte) ([]byte, error) {
	for i := range rps {
		var err error
		if b, err = rps[i].apply(vars, b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// encoded reports whether a message's body has a content coding other than identity: its
// bytes are not the text a pattern is written for.
func encoded(h http.Header) string {
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

func init() {
	registerRequestAction("request-body-find-replace", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (requestFunc, error) {
		rps, err := compileReplacements(a, cfg.(*trafficpolicy.FindReplaceConfig))
		if err != nil {
			return nil, err
		}
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			if c := encoded(r.Header); c != "" {
				ErrorPage(w, r, http.StatusUnsupportedMediaType, 3904, "The request body is encoded ("+c+"): this endpoint's traffic policy rewrites request bodies and cannot rewrite an encoded one.")
				return nil
			}
			if r.ContentLength > MaxFindReplaceBody {
				bodyTooLarge(w, r, "request", a.Type)
				return nil
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, MaxFindReplaceBody+1))
			if err != nil {
				ErrorPage(w, r, http.StatusBadRequest, 3903, "The request body could not be read for action type "+a.Type+".")
				return nil
			}
			if len(body) > MaxFindReplaceBody {
				bodyTooLarge(w, r, "request", a.Type)
				return nil
			}
			out, err := replaceAll(rps, vars(), body)
			if err != nil {
				bodyRewriteFailed(w, r, a, err)
				return nil
			}
			r2 := withOwnHeader(r)
			r2.Body = io.NopCloser(bytes.NewReader(out))
			r2.ContentLength = int64(len(out))
			r2.TransferEncoding = nil
			r2.Header.Set("Content-Length", strconv.Itoa(len(out)))
			return r2
		}, nil
	})
	registerResponseAction("response-body-find-replace", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (responseFunc, error) {
		rps, err := compileReplacements(a, cfg.(*trafficpolicy.FindReplaceConfig))
		if err != nil {
			return nil, err
		}
		tp.accept = "identity" // the upstream is asked for an uncompressed body
		return func(w *policyWriter, vars map[string]any) (bool, error) {
			if w.body == nil {
				w.body = &bodyRewriter{w: w, vars: vars, typ: a.Type}
			}
			w.body.actions = append(w.body.actions, rps)
			return false, nil
		}, nil
	})
}

func bodyTooLarge(w http.ResponseWriter, r *http.Request, what, typ string) {
	status := http.StatusRequestEntityTooLarge
	if what == "response" {
		status = http.StatusBadGateway
	}
	ErrorPage(w, r, status, 3903, fmt.Sprintf("The %s body could not be buffered for action type %s: it is larger than the %d bytes edgeplane rewrites.", what, typ, MaxFindReplaceBody))
}

func bodyRewriteFailed(w http.ResponseWriter, r *http.Request, a *trafficpolicy.Action, err error) {
	code := 3904
	if errors.Is(err, errBadPattern) {
		code = 3901
	}
	ErrorPage(w, r, http.StatusServiceUnavailable, code, fmt.Sprintf("The body could not be modified by %s (%s): %v", a.Path, a.Type, err))
}

// bodyRewriter holds a response body up to MaxFindReplaceBody, then writes it rewritten by
// each response-body-find-replace action that ran, in order, with its Content-Length.
type bodyRewriter struct {
	w       *policyWriter
	vars    map[string]any
	typ     string
	actions [][]replacement
	buf     bytes.Buffer
	failed  bool
}

// errBodyAbandoned stops the upstream's copy once the body is over the bound and the client
// has had its error page.
var errBodyAbandoned = errors.New("the response body is larger than edgeplane rewrites")

func (b *bodyRewriter) Write(p []byte) (int, error) {
	if b.failed {
		return 0, errBodyAbandoned
	}
	if b.buf.Len()+len(p) > MaxFindReplaceBody {
		b.abandon(func(w http.ResponseWriter) { bodyTooLarge(w, b.w.req, "response", b.typ) })
		return 0, errBodyAbandoned
	}
	return b.buf.Write(p)
}

// abandon answers the client in the upstream's place and drops the body.
func (b *bodyRewriter) abandon(answer func(http.ResponseWriter)) {
	b.failed = true
	w := b.w
	clear(w.Header())
	w.status = http.StatusBadGateway
	answer(w.ResponseWriter)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// finish rewrites the body and writes the status and the body.
func (b *bodyRewriter) finish() {
	if b.failed {
		return
	}
	w := b.w
	w.body = nil
	if c := encoded(w.Header()); c != "" {
		b.failed = true
		b.abandon(func(rw http.ResponseWriter) {
			ErrorPage(rw, b.w.req, http.StatusBadGateway, 3904, "The upstream's response is encoded ("+c+") although edgeplane asked for it uncompressed: this endpoint's traffic policy rewrites response bodies and cannot rewrite an encoded one.")
		})
		return
	}
	out := b.buf.Bytes()
	for _, rps := range b.actions {
		var err error
		if out, err = replaceAll(rps, b.vars, out); err != nil {
			b.abandon(func(rw http.ResponseWriter) {
				code := 3904
				if errors.Is(err, errBadPattern) {
					code = 3901
				}
				ErrorPage(rw, b.w.req, http.StatusBadGateway, code, "The response body could not be modified by "+b.typ+": "+err.Error())
			})
			return
		}
	}
	w.Header().Del("Transfer-Encoding")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.writeHead(int(w.status))
	_, _ = w.out(out)
}
