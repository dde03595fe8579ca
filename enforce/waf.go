package enforce

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

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
// a second and holds some 20 MB, so it is done when the first stage with such an action is
// built, and shared by every stage of the data plane (every route's and every bind's) that
// holds the same WAF: an action's own settings (its excluded rules) are applied to each of its
// transactions, never to the shared engine, so the engine has a single configuration and one
// account's exclusions never reach another's traffic. The stages hold the engine, and the WAF
// only a weak reference to it: once no stage has such an action any more (their policies were
// changed or deleted, their plans and binds replaced), the garbage collector takes the engine
// and Coraza's cache of its compiled patterns is released, and the next such stage compiles it
// again. A server whose policies never use the actions never compiles it. The zero value is
// ready to use.
type WAF struct {
	// BodyTimeout bounds reading the part of a request body that is inspected (0:
	// BodyReadTimeout).
	BodyTimeout time.Duration
	mu          sync.Mutex
	cur         weak.Pointer[wafEngine]
	err         error // a rule set that did not compile does not compile later either
	compiles    atomic.Int64
}

// wafEngine is a compiled engine, held by the stages that use it.
type wafEngine struct{ coraza.WAF }

// NewWAF returns a WAF that compiles its rules when first used.
func NewWAF() *WAF { return &WAF{} }

// engine returns the compiled engine, compiling it when no stage holds one.
func (w *WAF) engine() (*wafEngine, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	if e := w.cur.Value(); e != nil {
		return e, nil
	}
	engine, err := compileWAF()
	if err != nil {
		w.err = err
		return nil, err
	}
	w.compiles.Add(1)
	e := &wafEngine{engine}
	w.cur = weak.Make(e)
	// Coraza keeps the engine's compiled patterns in a cache of its own until the engine is
	// closed; closing it once the stages have let it go gives them back.
	runtime.AddCleanup(e, func(c coraza.WAF) {
		if cl, ok := c.(io.Closer); ok {
			_ = cl.Close()
		}
	}, engine)
	return e, nil
}

// compileWAF compiles the Core Rule Set with wafDirectives and checks that the engine offers
// what edgeplane uses of a transaction.
func compileWAF() (coraza.WAF, error) {
	waf, err := coraza.NewWAF(coraza.NewWAFConfig().WithRootFS(coreruleset.FS).WithDirectives(wafDirectives))
	if err != nil {
		return nil, fmt.Errorf("the OWASP Core Rule Set did not compile: %v", err)
	}
	// Exclusions are applied per transaction: a Coraza that no longer offers that would
	// apply an action's exclude_rule_ids nowhere, so it is refused here, once.
	tx := waf.NewTransaction()
	defer tx.Close()
	if _, ok := tx.(ruleRemover); !ok {
		return nil, errors.New("the WAF engine cannot leave rules out of a transaction (exclude_rule_ids)")
	}
	if _, ok := tx.(txVariables); !ok {
		return nil, errors.New("the WAF engine does not give a transaction's anomaly score")
	}
	return waf, nil
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
