package enforce

import (
	"net/http"
	"slices"

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
	registerResponseAction("compress-response", func(_ *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		codings := build(cfg)
		return func(w *policyWriter, _ map[string]any) (bool, error) {
			w.codings = codings
			return false, nil
		}, nil
	})
	registerRequestAction("compress-response", func(_ *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		codings := build(cfg)
		tp.writer = true
		return func(w http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request {
			if pw, ok := w.(*policyWriter); ok {
				pw.codings = codings
			}
			return r
		}, nil
	})
}
