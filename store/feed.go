package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// The change feed: the data plane rebuilds an account's routing plan when the account's
// configuration changes. Every write of the generic object code (create, update, module
// changes, delete) to a collection a plan reads announces its account once it has committed:
// in this process directly, and on PostgreSQL to every replica with NOTIFY, sent off the
// request's path in batches (notify.go). A notification lost to a crash between the commit and
// the NOTIFY is made up by the data plane's periodic full rebuild.

// AllAccounts is announced when any account may have changed (a restore, a lost notification
// channel): subscribers rebuild everything.
const AllAccounts = "*"

// feed fans announcements out to subscribers. Each subscriber has a set of pending accounts and
// a wake-up channel, so a burst of writes costs one rebuild per account, and a slow subscriber
// never blocks a writer.
type feed struct {
	mu   sync.Mutex
	subs []*Subscription
	// snaps keeps the accounts' documents between snapshots (snapcache.go); an announcement of
	// AllAccounts (a lost notification channel, a restore) empties it.
	snaps snapCache
}

// Subscription receives the accounts whose configuration changed.
type Subscription struct {
	f *feed
	// agents is set for a subscription that also hears of the collections online agents depend
	// on (agentKinds), not only of those a routing plan reads.
	agents  bool
	mu      sync.Mutex
	pending map[string]struct{}
	wake    chan struct{}
}

// Subscribe starts receiving change announcements; Close ends it.
func (s *Store) Subscribe() *Subscription {
	return s.subscribe(false)
}

// SubscribeAgents starts receiving the accounts whose credentials or reservations changed, as
// well as those whose plan collections did: the agent gateway re-checks the online sessions of
// those accounts only, instead of every session on a timer.
func (s *Store) SubscribeAgents() *Subscription {
	return s.subscribe(true)
}

func (s *Store) subscribe(agents bool) *Subscription {
	sub := &Subscription{f: &s.feed, agents: agents, pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	s.feed.mu.Lock()
	s.feed.subs = append(s.feed.subs, sub)
	s.feed.mu.Unlock()
	return sub
}

// Wake is signalled when Take has accounts to return.
func (sub *Subscription) Wake() <-chan struct{} { return sub.wake }

// Take returns the accounts announced since the last Take (AllAccounts among them when every
// account is to be rebuilt).
func (sub *Subscription) Take() []string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	out := make([]string, 0, len(sub.pending))
	for a := range sub.pending {
		out = append(out, a)
	}
	clear(sub.pending)
	return out
}

// Close ends the subscription.
func (sub *Subscription) Close() {
	f := sub.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.subs {
		if s == sub {
			f.subs = append(f.subs[:i], f.subs[i+1:]...)
			return
		}
	}
}

// announce tells every subscriber that account changed: plan says a collection a routing plan
// reads did (planKinds); otherwise only the subscribers of agent changes hear of it.
func (f *feed) announce(account string, plan bool) {
	if account == AllAccounts {
		f.snaps.reset()
	}
	f.mu.Lock()
	subs := f.subs
	f.mu.Unlock()
	for _, sub := range subs {
		if !plan && !sub.agents {
			continue
		}
		sub.mu.Lock()
		sub.pending[account] = struct{}{}
		sub.mu.Unlock()
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
}

// planKinds are the collections whose changes can change a routing plan.
var planKinds = map[string]bool{
	ep.HTTPSEdges.Kind: true, ep.HTTPSEdgeRoutes.Kind: true, ep.TLSEdges.Kind: true, ep.TCPEdges.Kind: true,
	ep.TunnelGroupBackends.Kind: true, ep.StaticBackends.Kind: true, ep.HTTPResponseBackends.Kind: true,
	ep.FailoverBackends.Kind: true, ep.WeightedBackends.Kind: true, ep.IPPolicies.Kind: true,
	ep.IPPolicyRules.Kind: true, ep.CertificateAuthorities.Kind: true, ep.ReservedDomains.Kind: true,
	ep.ReservedAddrs.Kind: true, ep.TLSCertificates.Kind: true,
}

// agentKinds are the collections whose deletion takes online agents' sessions or tunnels
// offline (tunnel.Gateway): credentials (and the bot users that own them), and reservations.
var agentKinds = map[string]bool{
	ep.Credentials.Kind: true, ep.BotUsers.Kind: true, ep.ReservedDomains.Kind: true, ep.ReservedAddrs.Kind: true,
}

// committed announces a committed write of the account to a collection: in this process at
// once, and on PostgreSQL to the other replicas through the notifier.
func (s *Store) committed(account string, res *ep.Resource, err error) {
	if err != nil {
		return
	}
	plan := planKinds[res.Kind]
	if !plan && !agentKinds[res.Kind] {
		return
	}
	s.feed.announce(account, plan)
	if s.notify != nil {
		s.notify.queue(account, plan)
	}
}

// notifyChannel is the PostgreSQL channel of the change feed.
const notifyChannel = "edgeplane_changes"

// Snapshot reads what the data plane needs of one account: its edges with their routes, its
// backends, IP policy rules, certificate authorities and reserved domains, the TLS
// certificates attached to those domains with their private keys (decrypted: the public
// listener serves them), and the SAML request signing keys of its routes. The secrets inside
// documents (webhook secrets, OAuth and OIDC client secrets) are opened: the data plane
// verifies and signs in with them. The documents returned are shared with later snapshots of
// the account and must not be changed (the HTTPS edges excepted: each snapshot has its own).
func (s *Store) Snapshot(ctx context.Context, account string) (*SnapshotDocs, error) {
	kinds := []*ep.Resource{ep.HTTPSEdges, ep.HTTPSEdgeRoutes, ep.TLSEdges, ep.TCPEdges, ep.IPPolicyRules,
		ep.CertificateAuthorities, ep.TunnelGroupBackends, ep.StaticBackends, ep.HTTPResponseBackends,
		ep.FailoverBackends, ep.WeightedBackends, ep.ReservedDomains}
	out := &SnapshotDocs{Account: account, ByKind: map[*ep.Resource][]ep.Document{}, Keys: map[string]string{}}
	// The documents come from the snapshot cache (snapcache.go), which reads only the rows
	// changed since the account's last snapshot.
	cached, gen := s.feed.snaps.take(account, time.Now())
	if cached == nil {
		cached = &snapAccount{kinds: map[string]map[string]snapEntry{}}
	}
	cached.bytes = 0
	for _, res := range kinds {
		docs, err := s.snapshotObjects(ctx, account, res, cached)
		if err != nil {
			return nil, err
		}
		out.ByKind[res] = docs
	}
	cached.used = time.Now()
	s.feed.snaps.put(account, cached, gen)
	// The cached documents are shared by every snapshot of the account and must stay as read;
	// the planner sets the routes of the HTTPS edges it is given, so those are copies.
	for i, d := range out.ByKind[ep.HTTPSEdges] {
		e := *d.(*ep.HTTPSEdge)
		out.ByKind[ep.HTTPSEdges][i] = &e
	}
	for _, d := range out.ByKind[ep.ReservedDomains] {
		rd := d.(*ep.ReservedDomain)
		if rd.Certificate == nil {
			continue
		}
		cd, err := s.Get(ctx, account, ep.TLSCertificates, "", rd.Certificate.ID)
		if ep.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		key, ok, err := s.objectSecret(ctx, account, rd.Certificate.ID)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		out.ByKind[ep.TLSCertificates] = append(out.ByKind[ep.TLSCertificates], cd)
		out.Keys[rd.Certificate.ID] = key
	}
	// The SAML request signing keys of the routes with the module: the data plane signs the
	// routes' authentication requests with them.
	for _, d := range out.ByKind[ep.HTTPSEdgeRoutes] {
		if r := d.(*ep.HTTPSEdgeRoute); r.SAML != nil {
			key, ok, err := s.objectSecret(ctx, account, r.ID)
			if err != nil {
				return nil, err
			}
			if ok {
				out.Keys[r.ID] = key
			}
		}
	}
	return out, nil
}

// SnapshotDocs is one account's documents of the kinds the data plane reads, by collection,
// and private keys by the id of the object keeping them: its TLS certificates that are
// attached to reserved domains, and its routes with a SAML module (their request signing keys).
type SnapshotDocs struct {
	Account string
	ByKind  map[*ep.Resource][]ep.Document
	Keys    map[string]string
}

// planKindsHeld are the collections that give an account a part in the routing plan.
var planKindsHeld = []*ep.Resource{ep.HTTPSEdges, ep.TLSEdges, ep.TCPEdges, ep.ReservedDomains}

// HasPlan reports whether the account has an edge or a reserved domain, with a few indexed
// lookups: an account with neither has no part in the routing plan, however many other objects
// it holds.
func (s *Store) HasPlan(ctx context.Context, account string) (bool, error) {
	for _, res := range planKindsHeld {
		var one int
		err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM objects WHERE account_id = ? AND kind = ? LIMIT 1`), account, res.Kind).Scan(&one)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return false, s.classify(err)
		}
	}
	return false, nil
}

// PlanAccounts lists the accounts that have an edge or a reserved domain: the ones whose parts a
// starting data plane builds.
func (s *Store) PlanAccounts(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT DISTINCT account_id FROM objects WHERE kind IN (?, ?, ?, ?)`),
		ep.HTTPSEdges.Kind, ep.TLSEdges.Kind, ep.TCPEdges.Kind, ep.ReservedDomains.Kind)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, s.classify(err)
		}
		out = append(out, a)
	}
	return out, s.classify(rows.Err())
}

// Requeue puts accounts back for the next Take (a rebuild that failed).
func (sub *Subscription) Requeue(accounts []string) {
	sub.mu.Lock()
	for _, a := range accounts {
		sub.pending[a] = struct{}{}
	}
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}
