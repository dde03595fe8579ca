package enforce

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/corazawaf/coraza/v3/types"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The owasp-crs-request and owasp-crs-response actions run the OWASP Core Rule Set (Coraza,
// see WAF) over the request before it goes upstream, or over the upstream's response before it
// reaches the client, as ngrok documents them: each matching rule adds to the message's anomaly
// score, and a score over the Core Rule Set's threshold (5 inbound, 4 outbound) blocks it with
// 403 ERR_NGROK_3700. The headers are always inspected; with process_body the first MaxWAFBody
// bytes of the body too (read within BodyReadTimeout; the rest streams on unchecked), and the
// request's query arguments in every case. exclude_rule_ids leaves rules out of the action's
// transactions only.
//
// on_error halt (the default) answers a block, and an engine error or a body that cannot be
// inspected (an encoded one) with 503 ERR_NGROK_3700; continue lets the message go on, its
// decision recorded for the rules after it (actions.ngrok.owasp_crs_request.decision, "allow" or
// "block", and .anomaly_score, likewise owasp_crs_response), which is ngrok's way of trying the
// rules without blocking. A request body that cannot be read is refused whatever on_error says:
// what was read of it cannot be given back to the upstream.
func init() {
	registerRequestAction("owasp-crs-request", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		c := cfg.(*trafficpolicy.OWASPCRSConfig)
		engine, err := tp.wafEngine()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", a.Path, err)
		}
		exclude, results := c.ExcludeRuleIDs, tp.results
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			tx := wafTx(engine, exclude)
			defer closeTx(tx)
			it := wafRequestHeaders(tx, r)
			var inspectErr error
			if it == nil && c.ProcessBody && r.Body != nil && r.Body != http.NoBody {
				if enc := encoded(r.Header); enc != "" {
					inspectErr = fmt.Errorf("the request body is encoded (%s)", enc)
				} else {
					var ok bool
					if r, ok = wafReadBody(w, r, a.Type, tp.opts.WAF.BodyTimeout); !ok {
						return nil
					}
					it, _, inspectErr = tx.WriteRequestBody(wafHeld(r))
				}
			}
			if it == nil && inspectErr == nil {
				it, inspectErr = tx.ProcessRequestBody()
			}
			if results {
				trafficpolicy.SetResult(vars(), "owasp_crs_request", wafResult(tx, it, "inbound"))
			}
			if !c.Halts() {
				return r
			}
			if inspectErr != nil {
				wafFailed(w, r, "request", inspectErr)
				return nil
			}
			if it != nil {
				wafBlocked(w, r, "request", it)
				return nil
			}
			return r
		}, nil
	})
	registerResponseAction("owasp-crs-response", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (responseFunc, error) {
		c := cfg.(*trafficpolicy.OWASPCRSConfig)
		engine, err := tp.wafEngine()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", a.Path, err)
		}
		exclude := slices.Concat(c.ExcludeRuleIDs, inboundBlocking)
		results := tp.results
		if c.ProcessBody {
			tp.accept = "identity" // an encoded body cannot be inspected
		}
		return func(w *policyWriter, vars map[string]any) (bool, error) {
			tx := wafTx(engine, exclude)
			check := &wafCheck{tx: tx, cfg: c, vars: vars, results: results}
			// The rule set is set up in the request headers' phase; the request body's phase,
			// where the request rules do most of their work, is the request action's and is
			// skipped here.
			wafRequestHeaders(tx, w.req)
			for name, vs := range w.Header() {
				for _, v := range vs {
					tx.AddResponseHeader(name, v)
				}
			}
			check.it = tx.ProcessResponseHeaders(int(w.status), w.req.Proto)
			if check.it == nil && check.err == nil && c.ProcessBody && tx.IsResponseBodyProcessable() {
				if enc := encoded(w.Header()); enc != "" {
					check.err = fmt.Errorf("the response body is encoded (%s)", enc)
				} else {
					if results { // what the later rules of the phase see: the body comes after them
						trafficpolicy.SetResult(vars, "owasp_crs_response", wafResult(tx, nil, "outbound"))
					}
					if w.waf == nil {
						w.waf = &wafBody{w: w}
					}
					w.waf.checks = append(w.waf.checks, check)
					return false, nil // decided once the body's first bytes are in (wafBody)
				}
			}
			return check.decide(w), nil
		}, nil
	})
}

// wafEngine is the stage's WAF engine: the data plane's shared one (PolicyOptions.WAF), or one
// of the stage's own without it.
func (tp *TrafficPolicy) wafEngine() (*wafEngine, error) {
	if tp.opts.WAF == nil {
		tp.opts.WAF = NewWAF()
	}
	return tp.opts.WAF.engine()
}

// wafRequestHeaders gives the transaction the request's connection, line and headers and runs
// the rules of the request headers.
func wafRequestHeaders(tx types.Transaction, r *http.Request) *types.Interruption {
	client, cport := splitAddr(r.RemoteAddr)
	server, sport := "", 0
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		server, sport = splitAddr(a.String())
	}
	tx.ProcessConnection(client, cport, server, sport)
	tx.ProcessURI(r.URL.RequestURI(), r.Method, r.Proto)
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	tx.SetServerName(host)
	tx.AddRequestHeader("Host", r.Host)
	for name, vs := range r.Header {
		for _, v := range vs {
			tx.AddRequestHeader(name, v)
		}
	}
	return tx.ProcessRequestHeaders()
}

func splitAddr(addr string) (string, int) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

// heldBody is a request body whose first bytes were read for inspection: they are given to the
// upstream first, then the rest of the body.
type heldBody struct {
	io.Reader
	io.Closer
	held []byte
}

// wafReadBody reads the first MaxWAFBody bytes of the request body within its time bound (0:
// BodyReadTimeout), answering the refusal itself (400, or 408 too slow) and reporting false when
// it could not.
func wafReadBody(w http.ResponseWriter, r *http.Request, typ string, within time.Duration) (*http.Request, bool) {
	body := boundBodyTime(w, r, within)
	held, err := io.ReadAll(io.LimitReader(body, MaxWAFBody))
	if err != nil {
		if timedOut(err) {
			ErrorPage(w, r, http.StatusRequestTimeout, 3903, "The request body did not arrive in time for action type "+typ+".")
		} else {
			ErrorPage(w, r, http.StatusBadRequest, 3903, "The request body could not be read for action type "+typ+".")
		}
		return nil, false
	}
	body.lift()
	r2 := new(http.Request)
	*r2 = *r
	r2.Body = &heldBody{Reader: io.MultiReader(bytes.NewReader(held), r.Body), Closer: r.Body, held: held}
	return r2, true
}

// wafHeld is what wafReadBody read of the request's body.
func wafHeld(r *http.Request) []byte {
	if b, ok := r.Body.(*heldBody); ok {
		return b.held
	}
	return nil
}

// wafResult is the action's result for the rules after it.
func wafResult(tx types.Transaction, it *types.Interruption, direction string) map[string]any {
	decision := "allow"
	if it != nil {
		decision = "block"
	}
	return map[string]any{"decision": decision, "anomaly_score": int64(anomalyScore(tx, direction))}
}

// wafBlocked answers a message the rule set blocked.
func wafBlocked(w http.ResponseWriter, r *http.Request, what string, it *types.Interruption) {
	ErrorPage(w, r, http.StatusForbidden, WAFCode, fmt.Sprintf("The %s was blocked by the web application firewall (OWASP Core Rule Set rule %d).", what, it.RuleID))
}

// wafFailed answers a message the rule set could not be run on (on_error: halt).
func wafFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	ErrorPage(w, r, http.StatusServiceUnavailable, WAFCode, fmt.Sprintf("The %s could not be inspected by the web application firewall: %v.", what, err))
}
