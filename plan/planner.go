package plan

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// Source is what a Planner reads of the store: the accounts with a plan, whether one account
// has one, its configuration in one read, and the feed announcing the accounts whose
// configuration changed. *store.Store implements it.
type Source interface {
	Subscribe() *store.Subscription
	PlanAccounts(ctx context.Context) ([]string, error)
	HasPlan(ctx context.Context, account string) (bool, error)
	Snapshot(ctx context.Context, account string) (*store.SnapshotDocs, error)
}

var _ Source = (*store.Store)(nil)

// Planner keeps the routing plan current: it builds every account's part at start, then
// rebuilds an account's part whenever the store's change feed announces the account, and
// swaps the merged plan in atomically. Requests in flight keep the plan they started with.
type Planner struct {
	st      Source
	log     *slog.Logger
	cur     atomic.Pointer[Plan]
	sub     *store.Subscription
	final   http.Handler
	env     *Env
	live    *Live               // state of stages that outlives a plan
	parts   map[string]*Account // owned by the loop goroutine
	onSwap  []func(*Plan)
	stop    chan struct{}
	done    chan struct{}
	started bool
	rebuilt atomic.Uint64
	// buildTime, when not nil, is told how long each account's build took (NewPlanner).
	buildTime func(time.Duration)
}

// resyncEvery is how often every account is rebuilt whatever the feed said: it makes up for
// a notification lost between replicas (a crash between a commit and its NOTIFY).
const resyncEvery = 30 * time.Second

// gatherWrites is how long the planner waits after an announcement for more before rebuilding:
// a burst of API writes costs one rebuild per account, and a change still reaches traffic well
// within a second.
const gatherWrites = 20 * time.Millisecond

// NewPlanner builds the plan of every account with edges; Start follows changes from then on.
// final is the handler behind every route's stages (ingress.Server.EdgeHandler); env is what
// stages may use (ingress.Server.Env). buildTime, when not nil, is told how long each
// account's build took (reading its snapshot and building its part; a build that fails is not
// told), from the first builds here on: it is the data plane's plan build histogram. The
// planner holds the live state of its plans' stages (Live).
func NewPlanner(ctx context.Context, st Source, log *slog.Logger, final http.Handler, env *Env, buildTime func(time.Duration)) (*Planner, error) {
	p := &Planner{st: st, log: log, parts: map[string]*Account{}, final: final, env: env, live: NewLive(),
		stop: make(chan struct{}), done: make(chan struct{}), buildTime: buildTime}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.sub = st.Subscribe() // before the first build, so no change falls between the two
	if err := p.rebuildAll(ctx); err != nil {
		p.sub.Close()
		return nil, err
	}
	return p, nil
}

// Start follows the change feed, rebuilding and swapping plans, until Close.
func (p *Planner) Start() {
	p.started = true
	go p.loop()
}

// Plan returns the current
func (p *Planner) Plan() *Plan { return p.cur.Load() }

// Rebuilds counts the plans swapped in so far (for tests and metrics).
func (p *Planner) Rebuilds() uint64 { return p.rebuilt.Load() }

// OnSwap adds a function run (in the planner's goroutine) after each swap, and once now with
// the current  Call it before Start.
func (p *Planner) OnSwap(f func(*Plan)) {
	p.onSwap = append(p.onSwap, f)
	f(p.Plan())
}

// Close stops following changes.
func (p *Planner) Close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	if p.started {
		<-p.done
	}
	p.sub.Close()
}

func (p *Planner) loop() {
	defer close(p.done)
	t := time.NewTicker(resyncEvery)
	defer t.Stop()
	for {
		var accounts []string
		select {
		case <-p.stop:
			return
		case <-p.sub.Wake():
			// A burst of writes is gathered into one rebuild: wait a moment before taking them.
			select {
			case <-p.stop:
				return
			case <-time.After(gatherWrites):
			}
			accounts = p.sub.Take()
		case <-t.C:
			accounts = []string{store.AllAccounts}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		if len(accounts) == 0 {
			cancel()
			continue
		}
		if contains(accounts, store.AllAccounts) {
			err = p.rebuildAll(ctx)
		} else {
			err = p.rebuild(ctx, accounts)
		}
		cancel()
		if err != nil {
			p.log.Warn("routing plan not rebuilt; retrying", "err", err)
			time.Sleep(500 * time.Millisecond)
			p.sub.Requeue(accounts)
		}
	}
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (p *Planner) rebuildAll(ctx context.Context) error {
	accounts, err := p.st.PlanAccounts(ctx)
	if err != nil {
		return err
	}
	parts := map[string]*Account{}
	for _, a := range accounts {
		part, err := p.build(ctx, a)
		if err != nil {
			return err
		}
		parts[a] = part
	}
	p.parts = parts
	p.swap()
	return nil
}

func (p *Planner) rebuild(ctx context.Context, accounts []string) error {
	parts := maps.Clone(p.parts)
	changed := false
	for _, a := range accounts {
		has, err := p.st.HasPlan(ctx, a)
		if err != nil {
			return err
		}
		if !has { // most writes are to accounts without edges or domains: nothing to build
			if _, had := parts[a]; had {
				delete(parts, a)
				changed = true
			}
			continue
		}
		part, err := p.build(ctx, a)
		if err != nil {
			return err
		}
		parts[a], changed = part, true
	}
	if changed {
		p.parts = parts
		p.swap()
	}
	return nil
}

func (p *Planner) swap() {
	pl := Merge(p.parts)
	p.cur.Store(pl)
	p.rebuilt.Add(1)
	for _, f := range p.onSwap {
		f(pl)
	}
}

// build reads one account's snapshot and builds its part.
func (p *Planner) build(ctx context.Context, account string) (*Account, error) {
	start := time.Now()
	part, err := p.buildPart(ctx, account)
	if err == nil && p.buildTime != nil {
		p.buildTime(time.Since(start))
	}
	return part, err
}

func (p *Planner) buildPart(ctx context.Context, account string) (*Account, error) {
	docs, err := p.st.Snapshot(ctx, account)
	if err != nil {
		return nil, err
	}
	backendKinds := []*ep.Resource{ep.TunnelGroupBackends, ep.StaticBackends, ep.HTTPResponseBackends, ep.FailoverBackends, ep.WeightedBackends}
	nBackends := 0
	for _, res := range backendKinds {
		nBackends += len(docs.ByKind[res])
	}
	// Sized up front, as Build's are: a large account's rebuild otherwise grows them step
	// by step.
	s := &Snapshot{Account: account, Backends: make(map[string]ep.Document, nBackends),
		CAs: map[string]*ep.CertificateAuthority{}, Env: p.env, HTTPSEdges: make([]*ep.HTTPSEdge, 0, len(docs.ByKind[ep.HTTPSEdges]))}
	routes := make(map[string][]*ep.HTTPSEdgeRoute, len(docs.ByKind[ep.HTTPSEdges]))
	s.SAMLKeys = map[string]string{}
	for _, d := range docs.ByKind[ep.HTTPSEdgeRoutes] {
		r := d.(*ep.HTTPSEdgeRoute)
		routes[r.EdgeID] = append(routes[r.EdgeID], r)
		if k, ok := docs.Keys[r.ID]; ok && r.SAML != nil {
			s.SAMLKeys[r.ID] = k
		}
	}
	for _, d := range docs.ByKind[ep.HTTPSEdges] {
		e := d.(*ep.HTTPSEdge)
		e.Routes = routes[e.ID]
		s.HTTPSEdges = append(s.HTTPSEdges, e)
	}
	for _, d := range docs.ByKind[ep.TLSEdges] {
		s.TLSEdges = append(s.TLSEdges, d.(*ep.TLSEdge))
	}
	for _, d := range docs.ByKind[ep.TCPEdges] {
		s.TCPEdges = append(s.TCPEdges, d.(*ep.TCPEdge))
	}
	for _, res := range backendKinds {
		for _, d := range docs.ByKind[res] {
			s.Backends[d.Base().ID] = d
		}
	}
	for _, d := range docs.ByKind[ep.IPPolicyRules] {
		s.Rules = append(s.Rules, d.(*ep.IPPolicyRule))
	}
	for _, d := range docs.ByKind[ep.CertificateAuthorities] {
		s.CAs[d.Base().ID] = d.(*ep.CertificateAuthority)
	}
	for _, d := range docs.ByKind[ep.ReservedDomains] {
		s.Domains = append(s.Domains, d.(*ep.ReservedDomain))
	}
	s.Certificates = map[string]CertKey{}
	for _, d := range docs.ByKind[ep.TLSCertificates] {
		s.Certificates[d.Base().ID] = CertKey{CertPEM: d.(*ep.TLSCertificate).CertificatePEM, KeyPEM: docs.Keys[d.Base().ID]}
	}
	return p.live.Build(s, p.final), nil
}
