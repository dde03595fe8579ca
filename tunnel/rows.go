package tunnel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/store"
)

// The API's view of agents: /tunnel_sessions and /tunnels documents, shaped as in the published
// schema, stored as rows so every replica lists every replica's agents.

// sessionRow is the session's row.
func (s *session) sessionRow() store.AgentSessionRow {
	started := ep.FormatTime(s.started)
	doc := ep.TunnelSession{Meta: ep.Meta{ID: s.id, CreatedAt: started}, AgentVersion: s.auth.Extra.Version,
		Credential: ep.NewRef(s.cred.ID), IP: s.remoteIP(), Metadata: s.auth.Extra.Metadata, OS: s.auth.Extra.OS,
		StartedAt: started, Transport: "ngrok/v2"}
	body, _ := json.Marshal(doc)
	return store.AgentSessionRow{ID: s.id, AccountID: s.cred.AccountID, CredentialID: s.cred.ID,
		Replica: s.gw.cfg.Replica, Conn: s.connID, Doc: body}
}

// putRow writes the session's row; an agent reconnecting with its session id takes its old row
// over, and the rows of its binds for it to make again (rebind.go).
func (s *session) putRow(ctx context.Context) error {
	took, err := s.gw.cfg.Store.PutAgentSession(ctx, s.sessionRow())
	if errors.Is(err, store.ErrIDTaken) { // another credential's session id: take a new one
		id, _ := ep.NewID("ts")
		s.gw.renameSession(s, id)
		return s.putRow(ctx)
	}
	if err == nil {
		s.mu.Lock()
		s.rows, s.rowsAt = true, time.Now()
		s.mu.Unlock()
		s.gw.expectRebinds(s, took)
	}
	return err
}

// putTunnelRow records a tunnel's row, under a new id when the one the agent presented is
// another account's. The store refuses it while another account holds the tunnel's name: its
// reservation covers the name (the same refusal as before the row, for a reservation made
// meanwhile), or its agent is online on it, on this replica or another (as when it is online
// here, whatever the pooling).
func (s *session) putTunnelRow(ctx context.Context, t *Tunnel) *bindError {
	err := s.gw.cfg.Store.PutAgentTunnel(ctx, tunnelRow(t))
	if errors.Is(err, store.ErrIDTaken) {
		t.rowID, _ = ep.NewID("tn")
		err = s.gw.cfg.Store.PutAgentTunnel(ctx, tunnelRow(t))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNameReserved) && t.proto == "tcp":
		return refuse(ep.AgentCodeAddrNotReserved, "The TCP address %s is reserved by another account.", t.addr)
	case errors.Is(err, store.ErrNameReserved):
		return refuse(ep.AgentCodeNotReserved, "The domain %s is reserved by another account.", t.host)
	case errors.Is(err, store.ErrNameOnline):
		return conflictRefusal(t, "account")
	case errors.Is(err, store.ErrEndpointOnline):
		return conflictRefusal(t, "online")
	case errors.Is(err, store.ErrPoolMix):
		return conflictRefusal(t, "pool-mix")
	case errors.Is(err, store.ErrPoolTLS):
		return conflictRefusal(t, "pool-tls")
	}
	s.gw.log.Warn("cannot record a tunnel row", "tunnel", t.rowID, "err", err)
	return refuse(ep.AgentCodeBadBind, "edgeplane cannot record the tunnel right now; try again shortly.")
}

func tunnelRow(t *Tunnel) store.AgentTunnelRow {
	started := ep.FormatTime(t.started)
	doc := ep.Tunnel{Meta: ep.Meta{ID: t.rowID, CreatedAt: started}, PublicURL: t.url, StartedAt: started,
		Metadata: t.metadata, Proto: t.proto, TunnelSession: ep.NewRef(t.sess.id), Labels: t.labels, ForwardsTo: t.forwardsTo}
	body, _ := json.Marshal(doc)
	r := store.AgentTunnelRow{ID: t.rowID, SessionID: t.sess.id, AccountID: t.sess.cred.AccountID, Name: t.name(), Doc: body,
		Proto: t.proto, Labels: t.labels, Pooled: t.pooled, Opts: t.opts}
	if t.tls != nil {
		r.TLSDigest = hex.EncodeToString(t.tls.digest[:])
	}
	return r
}

// reclaim writes again the rows of this replica's sessions and tunnels, after a time in which
// this replica could not refresh its row and the other replicas forgot them (a lost connection
// to the store, not a crash): until then its agents' names were held by nothing, and another
// account may have taken one (reserved it, or bound it on another replica). Each tunnel row goes
// through the same checks as a bind; a tunnel whose name another account now holds is stopped,
// and its agent told why. A session whose agent has meanwhile reconnected elsewhere ends.
func (g *Gateway) reclaim(ctx context.Context) {
	for _, s := range g.snapshotSessions() {
		s.mu.Lock()
		written := s.rows
		s.mu.Unlock()
		if !written {
			continue // its Auth is writing it
		}
		ours, err := g.cfg.Store.RestoreAgentSession(ctx, s.sessionRow())
		if err != nil {
			g.log.Warn("agent gateway: cannot write a session row again", "session", s.id, "err", err)
			return
		}
		if !ours {
			g.log.Info("agent session ended: its agent reconnected elsewhere", "session", s.id)
			s.close()
			continue
		}
		for _, t := range s.tunnelList() {
			berr := s.putTunnelRow(ctx, t)
			if berr == nil || berr.code == ep.AgentCodeBadBind {
				continue // written, or the store failed again: the next lapse retries
			}
			g.log.Warn("tunnel offline: another account took its name while this replica could not reach the store", "session", s.id, "tunnel", t.id, "url", t.url)
			s.stopTunnel(t, berr.code, berr.text())
		}
	}
}

// ErrNotHere is returned by Command for a session this replica does not hold.
var ErrNotHere = errors.New("tunnel: the session is held by another replica")

// Command sends restart, stop or update to an online session of this replica.
func (g *Gateway) Command(ctx context.Context, sessionID, command string) error {
	s := g.session(sessionID)
	if s == nil {
		return ErrNotHere
	}
	switch command {
	case ep.CommandRestart:
		return s.command(ctx, typeRestart, struct{}{})
	case ep.CommandStop:
		return s.command(ctx, typeStop, struct{}{})
	case ep.CommandUpdate:
		return s.command(ctx, typeUpdate, struct {
			Version            string
			PermitMajorVersion bool
		}{})
	}
	return errors.New("tunnel: unknown command " + command)
}

// serveTCP carries one public TCP connection to the tcp endpoint at addr, to a bind of this
// replica or another's.
func (g *Gateway) serveTCP(addr string, c net.Conn) {
	defer c.Close()
	t := g.Endpoint("tcp", addr)
	if t == nil {
		return
	}
	if g.cfg.CarryTCP != nil {
		g.cfg.CarryTCP(c, t, addr)
		return
	}
	if v := t.DecideConn(c, nil); !v.Allow || v.Forward != nil { // no listener here to forward it
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	up, err := t.Dial(ctx, c.RemoteAddr().String(), "tcp", "", false)
	cancel()
	if err != nil {
		return
	}
	netx.Pipe(c, up, g.cfg.TCPIdle)
}

// authLimiter answers an agent that keeps presenting the same refused token from the same
// address without asking the store again: a Go agent retries a bad token forever, every few
// seconds, and a fleet of them must cost no more than this map. Keying by address and token
// keeps one bad agent from locking out good ones behind the same address.
type authLimiter struct {
	mu    sync.Mutex
	fails map[limitKey]*failWindow
}

type limitKey struct {
	addr  netip.Addr
	token [16]byte
}

type failWindow struct {
	start time.Time
	n     int
}

const (
	failWindowLen = time.Minute
	maxFails      = 5
	maxFailKeys   = 100000
)

func newAuthLimiter() *authLimiter { return &authLimiter{fails: map[limitKey]*failWindow{}} }

func keyOf(a netip.Addr, token string) limitKey {
	sum := sha256.Sum256([]byte(token))
	k := limitKey{addr: a}
	copy(k.token[:], sum[:])
	return k
}

// allow reports whether the token from a may be checked against the store.
func (l *authLimiter) allow(a netip.Addr, token string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.fails[keyOf(a, token)]
	return w == nil || time.Since(w.start) > failWindowLen || w.n < maxFails
}

// failed records a refused authentication.
func (l *authLimiter) failed(a netip.Addr, token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.fails) >= maxFailKeys { // bounded memory under a spray of tokens or addresses
		for k, w := range l.fails {
			if now.Sub(w.start) > failWindowLen {
				delete(l.fails, k)
			}
		}
		if len(l.fails) >= maxFailKeys {
			clear(l.fails)
		}
	}
	k := keyOf(a, token)
	w := l.fails[k]
	if w == nil || now.Sub(w.start) > failWindowLen {
		l.fails[k] = &failWindow{start: now, n: 1}
		return
	}
	w.n++
}
