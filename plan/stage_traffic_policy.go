package plan

import (
	"crypto/sha256"
	"fmt"
	"sync"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
)

// The traffic_policy module of a route becomes an enforce.TrafficPolicy stage: the document is
// parsed and its expressions compiled in the plan build, never per request. A document the API
// would now refuse, or one using what edgeplane does not apply yet (an action such as
// rate-limit), fails the route closed naming it.
func init() {
	registerRouteStage("traffic_policy", func(cfg any, _ *Snapshot) (enforce.Stage, error) {
		st, err := policyStages.get(false, cfg.(*ep.EndpointTrafficPolicy).Value)
		if err != nil {
			return nil, err
		}
		return st.(*enforce.TrafficPolicy), nil
	})
}

// connPolicy builds the on_tcp_connect phase of a TLS or TCP edge's traffic_policy; a document
// with what edgeplane does not apply there fails the edge closed, naming it.
func connPolicy(e *Edge, m *ep.EndpointTrafficPolicy) {
	if m == nil || !m.Enabled || e.Unenforced != "" {
		return
	}
	st, err := policyStages.get(true, m.Value)
	if err != nil {
		e.Unenforced = fmt.Sprintf("traffic_policy (%v)", err)
		return
	}
	e.Policy = st.(*enforce.ConnPolicy)
}

// policyStages keeps the stage built for each document, so the periodic rebuilds of the plan do
// not parse and compile the same documents again: a stage holds no per-route state and may
// serve every route (or edge) with that document. Documents are keyed by their SHA-256; the
// cache forgets everything once it holds maxCachedPolicies documents or maxCachedPolicyBytes
// of them, so what it keeps beyond the live plan stays bounded.
var policyStages = &policyCache{m: map[policyKey]policyBuilt{}}

const (
	maxCachedPolicies    = 4096
	maxCachedPolicyBytes = 32 << 20
)

type policyKey struct {
	conn bool // the on_tcp_connect stage of a TLS or TCP edge, not a route's
	sum  [sha256.Size]byte
}

type policyBuilt struct {
	stage any // *enforce.TrafficPolicy or *enforce.ConnPolicy
	err   error
}

type policyCache struct {
	mu    sync.Mutex
	m     map[policyKey]policyBuilt
	bytes int
}

// get returns the stage of a document, building it the first time.
func (c *policyCache) get(conn bool, doc string) (any, error) {
	k := policyKey{conn: conn, sum: sha256.Sum256([]byte(doc))}
	c.mu.Lock()
	b, ok := c.m[k]
	c.mu.Unlock()
	if !ok {
		b = buildPolicy(conn, doc)
		c.mu.Lock()
		if len(c.m) >= maxCachedPolicies || c.bytes+len(doc) > maxCachedPolicyBytes {
			clear(c.m)
			c.bytes = 0
		}
		c.m[k] = b
		c.bytes += len(doc)
		c.mu.Unlock()
	}
	return b.stage, b.err
}

func buildPolicy(conn bool, doc string) policyBuilt {
	p, err := ep.ParseTrafficPolicy(doc)
	if err != nil {
		return policyBuilt{err: err}
	}
	if conn {
		cp, err := enforce.NewConnPolicy(p)
		return policyBuilt{stage: cp, err: err}
	}
	tp, err := enforce.NewTrafficPolicy(p)
	return policyBuilt{stage: tp, err: err}
}
