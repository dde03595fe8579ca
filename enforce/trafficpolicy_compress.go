package enforce

import (
	"net/http"
	"slices"
	"strings"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The compress-response action compresses the response with the compression module's rules
// (enforce.Compression: compressible types, not already encoded, no ranges, streamed, Vary:
// Accept-Encoding), among the algorithms its configuration allows, the coding the client's
// Accept-Encoding prefers by q-value. In on_http_response it acts on the response its rule
// matched; in on_http_request it asks for the response to come to be compressed. A response
// an action answers in on_http_response (deny, custom-response) is not compressed.
//
// edgeplane compresses with the four algorithms ngrok lists (br, gzip, deflate, compress), and
// an empty algorithms list allows them all; Parse refuses any other name.
func init() {
	build := func(cfg any) []string {
		algs := cfg.(*trafficpolicy.CompressResponseConfig).Algorithms
		if len(algs) == 0 {
			return Codings
		}
		// Codings' order settles ties of q-values, as the compression module does.
		var codings []string
		for _, c := range Codings {
			if slices.Contains(algs, c) {
				codings = append(codings, c)
			}
		}
		return codings
	}
	registerResponseAction("compress-response", func(_ *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (responseFunc, error) {
		codings := build(cfg)
		results := tp.results
		return func(w *policyWriter, vars map[string]any) (bool, error) {
			w.codings = codings
			if results {
				setCompressResult(vars, w.compressResult())
			}
			return false, nil
		}, nil
	})
	registerRequestAction("compress-response", func(_ *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		codings := build(cfg)
		tp.writer = true
		results := tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			if pw, ok := w.(*policyWriter); ok {
				pw.codings = codings
			}
			if results {
				coding := ""
				if r.Method != http.MethodHead {
					coding = negotiate(r.Header.Values("Accept-Encoding"), codings)
				}
				setCompressResult(vars(), map[string]any{"already_compressed": false, "negotiated_algorithm": coding})
			}
			return r
		}, nil
	})
}

// setCompressResult records compress-response's result under ngrok's documented name
// (actions.ngrok.compress) and under the action's own (compress_response), as every other
// action's result is named.
func setCompressResult(vars map[string]any, result map[string]any) {
	trafficpolicy.SetResult(vars, "compress", result)
	trafficpolicy.SetResult(vars, "compress_response", result)
}

// compressResult is what compress-response decides for the response being written: whether
// the upstream's answer is encoded already, and the coding it will be compressed with ("" for
// none: not a compressible type, a range, a HEAD, or no coding the client accepts).
func (w *policyWriter) compressResult() map[string]any {
	h := w.Header()
	ce := h.Get("Content-Encoding")
	already := ce != "" && !strings.EqualFold(ce, "identity")
	coding := ""
	if w.req.Method != http.MethodHead && eligible(int(w.status), h) {
		coding = negotiate(w.req.Header.Values("Accept-Encoding"), w.codings)
	}
	return map[string]any{"already_compressed": already, "negotiated_algorithm": coding}
}
