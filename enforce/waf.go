package enforce

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"
	"github.com/corazawaf/coraza/v3/types"
)

// MaxWAFBody is how much of a body owasp-crs-request and owasp-crs-response inspect when their
// process_body is set: ngrok evaluates the rules against the first 4 KiB and ignores the rest,
// and so does edgeplane. Only that much is ever held; the rest streams on unchecked.
const MaxWAFBody = 4 << 10

// WAFCode is ngrok's code for a request or response blocked by the web application firewall.
const WAFCode = 3700

// The rules every transaction of a response leaves out: a response is judged by its own
// (outbound) score only, so the request rules that a response's transaction also runs (the
// Core Rule Set's initialization is in the request headers' phase) must not block it on the
// request's (inbound) score; the request's own action did that, or was not asked to.
var inboundBlocking = []int{949110, 949111}

// wafDirectives configure Coraza with the OWASP Core Rule Set as ngrok describes its actions:
// Coraza's recommended settings and the Core Rule Set's setup example (anomaly scoring, inbound
// threshold 5, outbound 4, paranoia level 1), the engine blocking rather than only detecting,
// bodies processed partially (edgeplane hands over at most MaxWAFBody bytes, so a cut JSON or
// XML body must not count as malformed: the rules that refuse a body that does not parse are
// left out), JSON responses inspected as well as text, and no audit log (a block is answered,
// and counted with its code, like every other refusal of the data plane).
const wafDirectives = `
Include @coraza.conf-recommended
SecRuleEngine On
SecRequestBodyLimitAction ProcessPartial
SecResponseBodyLimitAction ProcessPartial
SecResponseBodyMimeType text/plain text/html text/xml application/json
SecRuleRemoveById 200002 200003
SecAuditEngine Off
Include @crs-setup.conf.example
Include @owasp_crs/*.conf
`

// WAF is the web application firewall of owasp-crs-request and owasp-crs-response: Coraza with
// the OWASP Core Rule Set embedded in the binary. Compiling the rule set takes a large part of
// a second and tens of megabytes, so it is done once, when the first stage with such an action
// is built, and shared by every stage of the data plane (every route's and every bind's) that
// holds the same WAF: an action's own settings (its excluded rules) are applied to each of its
// transactions, never to the shared engine, so the engine has a single configuration and one
// account's exclusions never reach another's traffic. The zero value is ready to use.
type WAF struct {
	// BodyTimeout bounds reading the part of a request body that is inspected (0:
	// BodyReadTimeout).
	BodyTimeout time.Duration
	once        sync.Once
	waf         coraza.WAF
	err         error
}

// NewWAF returns a WAF that compiles its rules when first used.
func NewWAF() *WAF { return &WAF{} }

// engine returns the compiled engine, compiling it on first use.
func (w *WAF) engine() (coraza.WAF, error) {
	w.once.Do(func() {
		w.waf, w.err = coraza.NewWAF(coraza.NewWAFConfig().WithRootFS(coreruleset.FS).WithDirectives(wafDirectives))
		if w.err != nil {
			w.err = fmt.Errorf("the OWASP Core Rule Set did not compile: %v", w.err)
			return
		}
		// Exclusions are applied per transaction: a Coraza that no longer offers that would
		// apply an action's exclude_rule_ids nowhere, so it is refused here, once.
		tx := w.waf.NewTransaction()
		defer tx.Close()
		if _, ok := tx.(ruleRemover); !ok {
			w.waf, w.err = nil, errors.New("the WAF engine cannot leave rules out of a transaction (exclude_rule_ids)")
		}
		if _, ok := tx.(txVariables); !ok {
			w.waf, w.err = nil, errors.New("the WAF engine does not give a transaction's anomaly score")
		}
	})
	return w.waf, w.err
}

// ruleRemover and txVariables are what edgeplane uses of a Coraza transaction beyond its
// interface: leaving rules out of it, and reading its anomaly score.
type (
	ruleRemover interface{ RemoveRuleByID(id int) }
	txVariables interface {
		Variables() plugintypes.TransactionVariables
	}
)

// wafTx starts a transaction leaving out the given rules.
func wafTx(engine coraza.WAF, exclude []int) types.Transaction {
	tx := engine.NewTransaction()
	rm := tx.(ruleRemover)
	for _, id := range exclude {
		rm.RemoveRuleByID(id)
	}
	return tx
}

// anomalyScore is the transaction's score of a direction ("inbound" or "outbound") so far.
func anomalyScore(tx types.Transaction, direction string) int {
	vals := tx.(txVariables).Variables().TX().Get("blocking_" + direction + "_anomaly_score")
	if len(vals) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(vals[0])
	return n
}

// closeTx runs the logging phase and releases the transaction.
func closeTx(tx types.Transaction) {
	tx.ProcessLogging()
	_ = tx.Close()
}
