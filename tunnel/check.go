package tunnel

import (
	"context"
	"slices"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// checkOnce takes offline what the store no longer backs: sessions whose credential was deleted
// (directly, or with the bot user owning it) or whose owner was deactivated; tunnels whose
// credential's ACL no longer permits them, and tunnels whose reserved domain or address was
// deleted. It checks the sessions of the accounts the change feed announced since the last
// check and the sessions authenticated since then, with one query for their credentials and one
// for their reservations; every fullCheckEvery, and when the feed may have lost announcements,
// it checks every session, and then also whether another account now holds the name of a
// tunnel (a reservation it could not have made while the tunnel was online, such as one made
// through a replica that could not see it, or before edgeplane refused them). At 10,000 idle
// sessions checking all of them every CheckInterval was a third of the server's CPU at rest.
func (g *Gateway) checkOnce() {
	var announced []string
	if g.changes != nil {
		announced = g.changes.Take()
	}
	g.mu.Lock()
	fresh := g.fresh
	g.fresh = nil
	g.mu.Unlock()
	full := g.changes == nil || time.Since(g.lastFull) >= fullCheckEvery || slices.Contains(announced, store.AllAccounts)
	var sessions []*session
	switch {
	case full:
		g.lastFull = time.Now()
		sessions = g.snapshotSessions()
	case len(announced) > 0:
		accounts := make(map[string]bool, len(announced))
		for _, a := range announced {
			accounts[a] = true
		}
		sessions = fresh
		for _, s := range g.snapshotSessions() {
			if accounts[s.cred.AccountID] {
				sessions = append(sessions, s)
			}
		}
	default:
		sessions = fresh
	}
	if len(sessions) == 0 {
		return
	}
	// Each id once: many sessions share a credential (10,000 agents of one fleet sent the same
	// id 10,000 times in every check).
	creds, reservations := uniqueIDs(), uniqueIDs()
	for _, s := range sessions {
		creds.add(s.cred.ID)
		for _, t := range s.tunnelList() {
			if t.reservation != "" {
				reservations.add(t.reservation)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	states, err := g.cfg.Store.CredentialStates(ctx, creds.ids)
	if err != nil {
		g.log.Warn("agent gateway: cannot check credentials", "err", err)
		return
	}
	live, err := g.cfg.Store.LiveObjects(ctx, reservations.ids)
	if err != nil {
		g.log.Warn("agent gateway: cannot check reservations", "err", err)
		return
	}
	for _, s := range sessions {
		state, ok := states[s.cred.ID]
		switch {
		case !ok:
			g.log.Info("agent session ended: its credential was deleted", "session", s.id, "credential", s.cred.ID)
			g.revoke(s.cred.ID)
			s.close()
			continue
		case !state.Active:
			g.log.Info("agent session ended: its credential's owner was deactivated", "session", s.id, "credential", s.cred.ID)
			s.close()
			continue
		}
		s.narrowACL(state.ACL)
		for _, t := range s.tunnelList() {
			if t.reservation != "" && !live[t.reservation] {
				g.log.Info("tunnel offline: its reservation was deleted", "tunnel", t.id, "url", t.url)
				s.stopTunnel(t, ep.AgentCodeNotReserved, errorText(ep.AgentCodeNotReserved, "The reservation of %s was deleted.", t.url))
			}
		}
	}
	if full {
		g.checkHolds(ctx, sessions)
	}
}

// narrowACL takes the credential's ACL as now stored and stops the session's tunnels it no
// longer permits, telling the agent (StopTunnel) with the refusal a new bind would get. The ACL
// is replaced under the session's lock, which a bind's last ACL check also takes (register):
// a bind either registered before, and is listed here, or checks against the new ACL.
func (s *session) narrowACL(acl []string) {
	s.mu.Lock()
	if slices.Equal(s.acl, acl) {
		s.mu.Unlock()
		return
	}
	s.acl = acl
	tunnels := make([]*Tunnel, 0, len(s.tunnels))
	for _, t := range s.tunnels {
		tunnels = append(tunnels, t)
	}
	s.mu.Unlock()
	for _, t := range tunnels {
		if berr := s.permits(acl, t); berr != nil {
			s.gw.log.Info("tunnel offline: its credential's ACL no longer permits it", "session", s.id, "tunnel", t.id, "url", t.url)
			s.stopTunnel(t, berr.code, berr.text())
		}
	}
}

// checkHolds stops the tunnels of the sessions whose name another account's reservation now
// covers (the exact name's, else the wildcard's one level up; a tcp address's): the public
// listeners already refuse to carry their traffic, and the agent is told.
func (g *Gateway) checkHolds(ctx context.Context, sessions []*session) {
	domains, addrs := uniqueIDs(), uniqueIDs()
	for _, s := range sessions {
		for _, t := range s.tunnelList() {
			switch {
			case t.proto == "" || t.internal: // an internal name is the account's own: no reservation covers it
			case t.proto == "tcp":
				addrs.add(t.addr)
			default:
				for _, c := range ep.DomainClaimsFor(t.host) {
					domains.add(c)
				}
			}
		}
	}
	if len(domains.ids)+len(addrs.ids) == 0 {
		return
	}
	byDomain, err := g.cfg.Store.ClaimHolders(ctx, ep.ClaimDomain, domains.ids)
	if err != nil {
		g.log.Warn("agent gateway: cannot check the names of tunnels", "err", err)
		return
	}
	byAddr, err := g.cfg.Store.ClaimHolders(ctx, ep.ClaimAddr, addrs.ids)
	if err != nil {
		g.log.Warn("agent gateway: cannot check the names of tunnels", "err", err)
		return
	}
	for _, s := range sessions {
		for _, t := range s.tunnelList() {
			holder := ""
			switch {
			case t.proto == "" || t.internal:
				continue
			case t.proto == "tcp":
				holder = byAddr[t.addr]
			default:
				for _, c := range ep.DomainClaimsFor(t.host) {
					if holder = byDomain[c]; holder != "" {
						break
					}
				}
			}
			if holder != "" && holder != s.cred.AccountID {
				g.log.Warn("tunnel offline: another account reserved its name", "session", s.id, "tunnel", t.id, "url", t.url)
				s.stopTunnel(t, ep.AgentCodeNotReserved, errorText(ep.AgentCodeNotReserved, "%s is reserved by another account.", t.url))
			}
		}
	}
}

// idSet collects ids once each, in the order first seen.
type idSet struct {
	seen map[string]struct{}
	ids  []string
}

func uniqueIDs() *idSet { return &idSet{seen: map[string]struct{}{}} }

func (u *idSet) add(id string) {
	if _, dup := u.seen[id]; !dup {
		u.seen[id] = struct{}{}
		u.ids = append(u.ids, id)
	}
}
