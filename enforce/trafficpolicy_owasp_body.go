package enforce

import (
	"errors"
	"net/http"

	"github.com/corazawaf/coraza/v3/types"

	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// wafCheck is one owasp-crs-response action's transaction on a response, until it is decided.
type wafCheck struct {
	tx      types.Transaction
	cfg     *trafficpolicy.OWASPCRSConfig
	vars    map[string]any
	results bool
	it      *types.Interruption
	err     error
}

// decide closes the transaction, records its result and, when the action halts on it, answers
// a block (403) or an error (503) in the upstream's place, reporting that it did.
func (c *wafCheck) decide(w *policyWriter) bool {
	defer closeTx(c.tx)
	if c.results {
		trafficpolicy.SetResult(c.vars, "owasp_crs_response", wafResult(c.tx, c.it, "outbound"))
	}
	if !c.cfg.Halts() || (c.it == nil && c.err == nil) {
		return false
	}
	clear(w.Header())
	if c.err != nil {
		w.status = http.StatusServiceUnavailable
		wafFailed(w.ResponseWriter, w.req, "response", c.err)
	} else {
		w.status = http.StatusForbidden
		wafBlocked(w.ResponseWriter, w.req, "response", c.it)
	}
	return true
}

// wafBody holds the first MaxWAFBody bytes of a response whose owasp-crs-response actions
// inspect the body (its status and headers not written yet), then decides: a blocked response
// is replaced by the refusal and the rest of the upstream's body dropped; an allowed one is
// written as it came and the rest streams on. A flush decides with what is held, so that a
// stream (server-sent events) is not held back waiting for bytes that may not come.
type wafBody struct {
	w      *policyWriter
	checks []*wafCheck
	buf    []byte
}

func (b *wafBody) Write(p []byte) (int, error) {
	room := MaxWAFBody - len(b.buf)
	if len(p) < room {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	b.buf = append(b.buf, p[:room]...)
	if !b.release() {
		return 0, errWAFBlocked
	}
	if _, err := b.w.Write(p[room:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// release decides on what is held: it reports false when an action answered in the upstream's
// place, else writes the status (unless a body rewriter writes it with its body) and what was
// held.
func (b *wafBody) release() bool {
	w := b.w
	w.waf = nil
	if w.discard { // a later action, or a rule that failed, answered in the upstream's place
		for _, c := range b.checks {
			closeTx(c.tx)
		}
		return false
	}
	for i, c := range b.checks {
		if c.it == nil && c.err == nil {
			if c.it, _, c.err = c.tx.WriteResponseBody(b.buf); c.it == nil && c.err == nil {
				c.it, c.err = c.tx.ProcessResponseBody()
			}
		}
		if c.decide(w) {
			for _, rest := range b.checks[i+1:] {
				closeTx(rest.tx)
			}
			w.discard, w.body, w.events = true, nil, nil
			return false
		}
	}
	if w.body == nil {
		w.writeHead(int(w.status))
	}
	if len(b.buf) > 0 {
		if _, err := w.Write(b.buf); err != nil {
			return false
		}
	}
	return true
}

// errWAFBlocked stops the upstream's copy once its response was refused.
var errWAFBlocked = errors.New("the response was blocked by the web application firewall")
