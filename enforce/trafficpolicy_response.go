package enforce

import (
	"fmt"
	"io"
	"maps"
	"net/http"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// responseFunc is an action of on_http_response made ready: it edits the response's headers, or
// answers in the upstream's place (deny, custom-response) and reports so.
type responseFunc func(w *policyWriter, vars map[string]any) (answered bool, err error)

// responseAction makes an action of on_http_response ready to run on the response's headers.
func (tp *TrafficPolicy) responseAction(a *trafficpolicy.Action) (responseFunc, error) {
	build, ok := responseActions[a.Type]
	if !ok || !trafficpolicy.Implemented(a.Type) {
		return nil, notApplied(a, trafficpolicy.OnHTTPResponse)
	}
	cfg, err := a.Decode()
	if err != nil {
		return nil, err
	}
	return build(a, cfg, tp)
}

func init() {
	registerResponseAction("add-headers", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		headers, err := compileHeaders(a, cfg.(*trafficpolicy.AddHeadersConfig).Headers)
		if err != nil {
			return nil, err
		}
		return func(w *policyWriter, vars map[string]any) (bool, error) {
			return false, headers.render(vars, w.Header().Add)
		}, nil
	})
	registerResponseAction("remove-headers", func(_ *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		c := cfg.(*trafficpolicy.RemoveHeadersConfig)
		return func(w *policyWriter, _ map[string]any) (bool, error) {
			removeHeaders(w.Header(), c.Headers)
			return false, nil
		}, nil
	})
	registerResponseAction("deny", func(_ *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		status := orDefault(cfg.(*trafficpolicy.DenyConfig).StatusCode, http.StatusForbidden)
		return func(w *policyWriter, _ map[string]any) (bool, error) {
			clear(w.Header())
			w.ResponseWriter.WriteHeader(status)
			return true, nil
		}, nil
	})
	registerResponseAction("custom-response", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		body, headers, status, err := compileCustomResponse(a, cfg.(*trafficpolicy.CustomResponseConfig))
		if err != nil {
			return nil, err
		}
		return func(w *policyWriter, vars map[string]any) (bool, error) {
			b, err := body.Render(vars)
			if err != nil {
				return false, err
			}
			h := http.Header{}
			if err := headers.render(vars, h.Set); err != nil {
				return false, err
			}
			clear(w.Header())
			maps.Copy(w.Header(), h)
			w.ResponseWriter.WriteHeader(status)
			_, _ = io.WriteString(w.ResponseWriter, b)
			return true, nil
		}, nil
	})
}

// policyWriter runs the response phase when the final status is written, compresses the
// response when a compress-response action asked for it (in either phase), rewrites its body
// (response-body-find-replace) or its event stream's messages (on_event_stream_message), and
// tells the actions that wait for the outcome (circuit-breaker) how the request ended.
type policyWriter struct {
	http.ResponseWriter
	tp      *TrafficPolicy
	vars    map[string]any
	req     *http.Request
	done    bool
	discard bool
	// status is an int32 so that it packs with the flags above: the writer, allocated for
	// every request of a policy with a response phase, stays in its 128-byte size class.
	status int32
	// codings is what compress-response allows (nil: no compression); cw compresses once the
	// final status is written.
	codings []string
	cw      *compressWriter
	// body buffers the response for response-body-find-replace; the status is written when
	// it is complete (finish). events rewrites an event stream's messages as they pass.
	body   *bodyRewriter
	events *eventRewriter
	// waf holds the start of the body for owasp-crs-response until it is decided on (the
	// status is written then).
	waf *wafBody
	// outcomes are told the final status once the request ends (settle).
	outcomes []func(status int, finished bool)
}

// WriteHeader runs the response phase on the final status (once), then writes it; an
// expression that fails to evaluate replaces the answer with a 503 and drops the upstream's body.
func (w *policyWriter) WriteHeader(code int) {
	if w.done || code < 200 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.done, w.status = true, int32(code)
	vars := w.vars
	if len(w.tp.response) > 0 || len(w.tp.events) > 0 {
		vars = trafficpolicy.ResponseVars(w.vars, code, w.Header())
		if w.codings != nil && w.tp.results {
			// compress-response ran in on_http_request: now that the response is known, its
			// result says what is done with it.
			setCompressResult(vars, w.compressResult())
		}
	}
	for _, pr := range w.tp.response {
		ok, err := pr.rule.Match(vars)
		if err != nil {
			w.fail(err)
			return
		}
		if !ok {
			continue
		}
		for _, act := range pr.response {
			answered, err := act(w, vars)
			if err != nil {
				w.fail(fmt.Errorf("%s: %v", pr.rule.Path, err))
				return
			}
			if answered { // deny or custom-response: the upstream's answer is replaced
				w.discard = true
				return
			}
		}
	}
	if len(w.tp.events) > 0 && isEventStream(w.Header()) {
		w.events = &eventRewriter{w: w, vars: vars}
	}
	if w.waf != nil || w.body != nil {
		return // written once the WAF decided (wafBody), or with the rewritten body (finish)
	}
	w.writeHead(code)
}

// fail answers 503 for a response phase that could not be evaluated, dropping the upstream's
// answer.
func (w *policyWriter) fail(err error) {
	w.discard, w.body, w.events = true, nil, nil
	w.status = http.StatusServiceUnavailable
	policyFailed(w.ResponseWriter, w.req, err)
}

// writeHead writes the status, through the compressor when compress-response asked for one.
func (w *policyWriter) writeHead(code int) {
	if w.codings != nil {
		coding := ""
		if w.req.Method != http.MethodHead {
			coding = negotiate(w.req.Header.Values("Accept-Encoding"), w.codings)
		}
		w.cw = &compressWriter{ResponseWriter: w.ResponseWriter, coding: coding}
		w.cw.WriteHeader(code)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes the body, after the status (200 if none was written).
func (w *policyWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.discard:
		return len(b), nil
	case w.waf != nil:
		return w.waf.Write(b)
	case w.body != nil:
		return w.body.Write(b)
	case w.events != nil:
		return w.events.Write(b)
	}
	return w.out(b)
}

// out writes to the client, compressed when the response is.
func (w *policyWriter) out(b []byte) (int, error) {
	if w.cw != nil {
		return w.cw.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// FlushError sends what was written so far, for streaming responses; a buffered body is not
// sent before it is complete.
func (w *policyWriter) FlushError() error {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	if w.waf != nil && !w.waf.release() {
		return http.NewResponseController(w.ResponseWriter).Flush() // the refusal
	}
	switch {
	case w.body != nil:
		return nil
	case w.cw != nil:
		return w.cw.FlushError()
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for callers that use http.Flusher.
func (w *policyWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (w *policyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes a buffered body, rewritten, and ends the compressed body (its trailer).
func (w *policyWriter) finish() {
	if w.waf != nil {
		w.waf.release()
	}
	if w.body != nil {
		w.body.finish()
	}
	if w.events != nil {
		w.events.finish()
	}
	if w.cw != nil {
		w.cw.finish()
	}
}

// settle tells the actions waiting for the outcome how the request ended: its final status
// (200 when the handler wrote none), or finished false for a handler that panicked (an aborted
// proxy).
func (w *policyWriter) settle(finished bool) {
	status := int(w.status)
	if status == 0 {
		status = http.StatusOK
	}
	for _, f := range w.outcomes {
		f(status, finished)
	}
	w.outcomes = nil
}
