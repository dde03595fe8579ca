package enforce

import (
	"fmt"
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
// edgeplane compresses with br, gzip and deflate, and an empty algorithms list allows the
// three. ngrok also lists compress, the Unix LZW format: no maintained Go library writes it,
// and no browser or common HTTP client asks for it, so a list naming it fails the stage's
// build naming it, rather than negotiating among less than the document allows.
func init() {
	build := func(a *trafficpolicy.Action, cfg any) ([]string, error) {
		algs := cfg.(*trafficpolicy.CompressResponseConfig).Algorithms
		if len(algs) == 0 {
			return Codings, nil
		}
		var missing []string
		for _, alg := range algs {
			if !slices.Contains(Codings, alg) {
				missing = append(missing, alg)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%s.config.algorithms: edgeplane does not compress with %s (only %s)",
				a.Path, strings.Join(missing, ", "), strings.Join(Codings, ", "))
		}
		// Codings' order settles ties of q-values, as the compression module does.
		var codings []string
		for _, c := range Codings {
			if slices.Contains(algs, c) {
				codings = append(codings, c)
			}
		}
		return codings, nil
	}
	registerResponseAction("compress-response", func(a *trafficpolicy.Action, cfg any, _ *TrafficPolicy) (responseFunc, error) {
		codings, err := build(a, cfg)
		if err != nil {
			return nil, err
		}
		return func(w *policyWriter, _ map[string]any) (bool, error) {
			w.codings = codings
			return false, nil
		}, nil
	})
	registerRequestAction("compress-response", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		codings, err := build(a, cfg)
		if err != nil {
			return nil, err
		}
		tp.writer = true
		return func(w http.ResponseWriter, r *http.Request, _ func() map[string]any) *http.Request {
			if pw, ok := w.(*policyWriter); ok {
				pw.codings = codings
			}
			return r
		}, nil
	})
}
