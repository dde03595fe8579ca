package tunnel

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/store"
	"golang.ngrok.com/muxado/v2"
)

// session is one authenticated agent connection.
type session struct {
	gw   *Gateway
	conn *tls.Conn
	mux  muxado.TypedStreamSession
	// raw is the session under mux: streams are accepted from it and their type read with a
	// deadline (acceptTyped), and opened through mux.
	raw muxado.Session
	id  string
	// conn names this connection in the session row (store.AgentSessionRow.Conn).
	connID  string
	remote  netip.AddrPort
	cred    store.AgentCredential
	auth    authMsg
	version string // the protocol version chosen: "3" or "2"
	// accepted is when the agent's connection was accepted, started when its TLS handshake
	// ended: the log of a session's start says how long each step took, which is what an
	// agent's move between replicas is made of.
	accepted, started time.Time

	mu      sync.Mutex
	tunnels map[string]*Tunnel // by bind id
	// acl is the credential's ACL as last read from the store: at Auth, then by the gateway's
	// check when the credential changes (which stops the tunnels it no longer permits).
	acl  []string
	rows bool // the session row was written
	// rowsAt is when it was last written (the directory's movedAway compares it).
	rowsAt time.Time
	done   chan struct{}
	once   sync.Once
	// authed is set once Auth succeeded (read by the authentication deadline's timer).
	authed atomic.Bool
	rpcs   chan struct{}
	// guard bounds the streams the agent holds open and the bytes it has sent on them
	// (streamguard.go); its limits rise once Auth has succeeded.
	guard *streamGuard
	// open counts the proxy streams open to the agent now, public connections and other
	// replicas' alike: a handover's drain ends a session only once none is left (drain.go).
	open atomic.Int64
	// moving is set when a drain ends the session for its agent to reconnect elsewhere: its
	// rows are left for the agent's new session to take over (drain.go).
	moving atomic.Bool
	// lost is set when the agent's link was lost (no goodbye from it: the connection broke, or
	// its heartbeats stopped): its rows are kept a while for the agent's return (relink.go).
	lost atomic.Bool

	// beating is set once the agent's heartbeat stream is being echoed (heartbeat.go); the
	// watchdog ends the session when no ping arrived within beatWindow. Both under mu.
	beating    bool
	watchdog   *time.Timer
	beatWindow time.Duration
}

func newSession(g *Gateway, conn *tls.Conn) *session {
	remote, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	connID, _ := ep.NewID("conn")
	return &session{gw: g, conn: conn, remote: remote, connID: connID, tunnels: map[string]*Tunnel{},
		done: make(chan struct{}), rpcs: make(chan struct{}, maxRPCs), started: time.Now()}
}

// run serves the session until the agent goes or the session is closed. The first request must
// be Auth, within the handshake timeout; heartbeats are echoed from the start.
func (s *session) run() {
	defer s.close()
	// Each frame goes to the agent in one write (framer.go). muxado does not announce a window,
	// each side assumes its own for the peer; with a window budget, muxado's buffers are made
	// large enough for grown windows and the guard and Dial hold both directions to what each
	// side granted (window.go), else they stay muxado's 256 KiB.
	s.guard = newPreAuthGuard()
	cfg := &muxado.Config{NewFramer: s.guard.framer}
	if s.gw.windows != nil {
		s.guard.wide, s.guard.budget = true, s.gw.windows
		cfg.MaxWindowSize = maxProxyWindow
		defer s.guard.endWide()
	}
	mux := muxado.Server(s.conn, cfg)
	s.raw, s.mux = mux, muxado.NewTypedStreamSession(mux)
	authTimer := time.AfterFunc(handshakeTimeout, func() {
		if !s.authed.Load() {
			s.close()
		}
	})
	defer authTimer.Stop()
	authed := false
	for {
		st, err := s.acceptTyped()
		if err != nil {
			if g := s.guard.tripped.Load(); g != nil {
				s.gw.log.Warn("agent session ended: stream limits", "session", s.id, "remote", s.remote.String(), "reason", g.msg)
			}
			if errors.Is(err, errNoStreamType) {
				s.gw.log.Warn("agent session ended: protocol", "session", s.id, "remote", s.remote.String(), "reason", err.Error())
			}
			s.gw.log.Debug("agent session: accept ended", "session", s.id, "err", err)
			s.noteLost(err)
			return
		}
		if st.StreamType() == heartbeatType {
			s.acceptHeartbeat(st)
			continue
		}
		if !authed {
			if st.StreamType() != typeAuth {
				st.Close()
				return
			}
			if !s.handleAuth(st) {
				return
			}
			authed = true
			netx.Trust(s.conn) // off the per-address count of unauthenticated connections
			s.authed.Store(true)
			authTimer.Stop()
			s.startWatchdog()
			continue
		}
		select {
		case s.rpcs <- struct{}{}:
		default:
			st.Close() // too many requests at once
			continue
		}
		go func() {
			defer func() { <-s.rpcs }()
			s.serveRPC(st)
		}()
	}
}

func (s *session) serveRPC(st muxado.TypedStream) {
	defer st.Close()
	switch st.StreamType() {
	case typeBind:
		var m bindMsg
		if err := readJSON(st, &m); err != nil {
			_ = writeReply(st, bindResp{Error: errorText(ep.AgentCodeBadBind, "The bind request is not valid: %v", err), Opts: json.RawMessage("{}")})
			return
		}
		resp := s.bind(&m)
		if resp.Error != "" {
			// The agent shows the refusal; the server's log says which session had it, for an
			// operator asked why an agent does not come online (ngrok-go retries it unlogged).
			s.gw.log.Debug("bind refused", "session", s.id, "proto", m.Proto, "error", firstLine(resp.Error))
		}
		_ = writeReply(st, resp)
	case typeLabel:
		var m labelMsg
		if err := readJSON(st, &m); err != nil {
			_ = writeReply(st, labelResp{Error: errorText(ep.AgentCodeBadBind, "The labeled tunnel request is not valid: %v", err)})
			return
		}
		_ = writeReply(st, s.label(&m))
	case typeUnbind:
		var m unbindMsg
		if err := readJSON(st, &m); err != nil {
			_ = writeReply(st, errorResp{Error: errorText(ep.AgentCodeBadBind, "The unbind request is not valid: %v", err)})
			return
		}
		// Unbind is idempotent: Rust clients send it twice for one listener.
		if t := s.tunnel(m.ID); t != nil {
			s.removeTunnel(t)
		}
		_ = writeReply(st, errorResp{})
	case typeSrvInfo:
		var m struct{}
		_ = readJSON(st, &m)
		_ = writeReply(st, struct{ Region string }{""})
	case typePatchTunnel:
		_ = writeReply(st, errorResp{Error: errorText(ep.AgentCodeBadBind, "edgeplane does not support updating a tunnel's state; unbind and bind again")})
	default:
		// AgentMetrics and unknown types: nothing to answer; the stream is reset.
	}
}

// handleAuth checks the Auth request and answers it; false ends the session.
func (s *session) handleAuth(st muxado.TypedStream) bool {
	defer st.Close()
	var m authMsg
	if err := readJSON(st, &m); err != nil {
		_ = writeReply(st, authResp{Error: errorText(ep.AgentCodeBadAuth, "The authentication request is not valid JSON: %v", err)})
		return false
	}
	s.auth = m
	token := m.Extra.Authtoken
	fail := func(code int, format string, args ...any) bool {
		s.gw.limiter.failed(s.remote.Addr(), token)
		_ = writeReply(st, authResp{Version: s.version, Error: errorText(code, format, args...)})
		return false
	}
	for _, v := range m.Version {
		if v == "3" || v == "2" {
			s.version = v
			break
		}
	}
	if s.version == "" {
		return fail(ep.AgentCodeBadVersion, "Your agent speaks protocol versions %q; edgeplane speaks 3 and 2. Update your agent.", m.Version)
	}
	if !s.gw.limiter.allow(s.remote.Addr(), token) {
		return fail(ep.AgentCodeUnknownToken, "The authtoken you specified is invalid, and this agent keeps retrying it: edgeplane stopped checking it for a minute.\nYour authtoken: %s", redact(token))
	}
	if token == "" {
		return fail(ep.AgentCodeNoToken, "Usage of edgeplane requires an authtoken: create a credential (POST /credentials) and give its token to your agent.")
	}
	selector, secret, ok := ep.ParseToken(token)
	if !ok {
		return fail(ep.AgentCodeBadToken, "The authtoken you specified does not look like a proper edgeplane authtoken.\nYour authtoken: %s", redact(token))
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	authAt := time.Now()
	cred, err := s.gw.cfg.Store.AuthenticateAgent(ctx, selector, secret)
	credAt := time.Now()
	if id, ok := s.gw.revokedCredential(selector); ok && errors.Is(err, store.ErrUnknownCredential) {
		return fail(ep.AgentCodeRevoked, "The authtoken credential %s has been revoked\nand is no longer valid.", id)
	}
	if errors.Is(err, store.ErrUnknownCredential) || (err == nil && !cred.Active) {
		return fail(ep.AgentCodeUnknownToken, "The authtoken you specified is properly formed, but it is invalid.\nYour authtoken: %s\nThis usually happens when the credential was deleted or its owner deactivated.", redact(token))
	}
	if err != nil {
		s.gw.log.Warn("agent auth: store unavailable", "err", err)
		_ = writeReply(st, authResp{Version: s.version, Error: errorText(ep.AgentCodeUnknownToken, "edgeplane cannot check your authtoken right now; try again shortly.")})
		return false
	}
	s.cred = cred
	s.mu.Lock()
	s.acl = cred.ACL
	s.mu.Unlock()
	// A reconnecting agent presents its session id again and keeps it: a session of that id
	// still open here is its old link, which it gave up on before this replica noticed (it is
	// ended as a lost link); another credential's is a stranger's guess, which gets a new id.
	s.id, _ = ep.NewID("ts")
	if ep.ValidID("ts", m.ClientID) {
		if old := s.gw.session(m.ClientID); old == nil {
			s.id = m.ClientID
		} else if old.cred.ID == cred.ID {
			old.supersede()
			s.id = m.ClientID
		}
	}
	if !s.gw.addSession(s) {
		return false
	}
	err = s.putRow(ctx)
	rowAt := time.Now()
	if err != nil {
		s.gw.log.Warn("agent auth: cannot record the session", "err", err)
		_ = writeReply(st, authResp{Version: s.version, Error: errorText(ep.AgentCodeUnknownToken, "edgeplane cannot record your session right now; try again shortly.")})
		return false
	}
	s.guard.authenticated() // before the agent reads the reply and opens its requests
	s.guard.shareAs(cred.AccountID)
	s.guard.growWindows(growableAgent(m.Extra.UserAgent))
	resp := authResp{Version: s.version, ClientID: s.id, Extra: authRespExtra{Version: s.gw.cfg.Version, Cookie: s.id, AccountName: ""}}
	if err := writeReply(st, resp); err != nil {
		return false
	}
	s.gw.log.Info("agent session started", "session", s.id, "credential", cred.ID, "remote", s.remote.String(),
		"agent", m.Extra.UserAgent, "version", s.version, "handshake", ms(s.started.Sub(s.accepted)),
		"auth_wait", ms(authAt.Sub(s.started)), "credential_read", ms(credAt.Sub(authAt)), "row_write", ms(rowAt.Sub(credAt)),
		"since_accept", ms(time.Since(s.accepted)))
	return true
}

// ms rounds a step's duration for the log.
func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// redact shows the start of a token in messages, never the whole secret.
func redact(token string) string {
	if len(token) > 8 {
		return token[:8] + "…"
	}
	return token
}

// currentACL is the credential's ACL as the session knows it now.
func (s *session) currentACL() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acl
}

func (s *session) tunnel(id string) *Tunnel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tunnels[id]
}

func (s *session) tunnelList() []*Tunnel {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Tunnel, 0, len(s.tunnels))
	for _, t := range s.tunnels {
		out = append(out, t)
	}
	return out
}

// removeTunnel takes a tunnel offline: the registry, its TCP listener, and its row. It reports
// whether the tunnel was online (an unbind and a stop may race).
func (s *session) removeTunnel(t *Tunnel) bool {
	s.mu.Lock()
	if s.tunnels[t.id] != t {
		s.mu.Unlock()
		return false
	}
	delete(s.tunnels, t.id)
	s.mu.Unlock()
	s.gw.Registry.remove(t)
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if err := s.gw.cfg.Store.DeleteAgentTunnel(ctx, t.rowID, s.id, s.connID); err != nil {
		s.gw.log.Warn("cannot delete a tunnel row", "tunnel", t.rowID, "err", err)
	}
	return true
}

// stopTunnel takes a tunnel offline on the server's initiative and tells the agent, where its
// protocol version allows (StopTunnel is misread by version-2 agents).
func (s *session) stopTunnel(t *Tunnel, code int, msg string) {
	if !s.removeTunnel(t) || s.version != "3" {
		return // already offline (and its agent told, or it unbound it), or a v2 agent
	}
	go func() {
		// Out of routing now; the agent is told once the streams opened before have reached it
		// (unanswered.go), so none of them is dropped unanswered by its side.
		t.streams.wait(stopGrace)
		st, err := s.mux.OpenTypedStream(typeStopTunnel)
		if err != nil {
			return
		}
		defer st.Close()
		_ = st.SetWriteDeadline(time.Now().Add(rpcTimeout))
		body, _ := json.Marshal(stopTunnelMsg{ID: t.id, Message: msg, ErrorCode: "ERR_NGROK_" + strconv.Itoa(code)})
		_, _ = st.Write(body)
		_ = st.CloseWrite()
	}()
}

// close ends the session: its tunnels go offline and its rows are deleted, unless the session
// is moving (then the agent's next session takes them over, or the drain deletes them).
func (s *session) close() {
	s.once.Do(func() {
		close(s.done)
		s.stopWatchdog()
		if s.mux != nil {
			s.mux.Close()
		} else {
			s.conn.Close()
		}
		s.gw.removeSession(s)
		s.gw.rebinds.forgetSession(s)
		for _, t := range s.tunnelList() {
			s.gw.Registry.remove(t)
		}
		switch {
		case !s.rows || s.moving.Load():
		case s.lost.Load() && !s.gw.closing():
			// Not when this replica closes: closing the agents' connections, it ends their
			// links itself, and a process on its way out would never delete their rows.
			s.dropNamedRows()
			s.gw.keepForReturn(s)
		default:
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			if err := s.gw.cfg.Store.DeleteAgentSession(ctx, s.id, s.connID); err != nil {
				s.gw.log.Warn("cannot delete a session row", "session", s.id, "err", err)
			}
		}
		if s.authed.Load() {
			s.gw.log.Info("agent session closed", "session", s.id)
		}
	})
}

// capable reports whether the agent said it handles a command: the field is "" when it does,
// null when it is too old to know it, and a reason when it does not.
func capable(field *string) bool { return field != nil && *field == "" }

// ErrUnsupported is returned for a command the agent did not declare support for.
var ErrUnsupported = errors.New("the agent does not support this command")

// command sends Restart, Stop or Update and waits for the agent's one JSON reply (agents leave
// the stream open after it).
func (s *session) command(ctx context.Context, typ muxado.StreamType, body any) error {
	switch typ {
	case typeRestart:
		if !capable(s.auth.Extra.RestartUnsupportedError) {
			return ErrUnsupported
		}
	case typeStop:
		if !capable(s.auth.Extra.StopUnsupportedError) {
			return ErrUnsupported
		}
	case typeUpdate:
		if !capable(s.auth.Extra.UpdateUnsupportedError) {
			return ErrUnsupported
		}
	}
	st, err := s.mux.OpenTypedStream(typ)
	if err != nil {
		return err
	}
	defer st.Close()
	msg, _ := json.Marshal(body)
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	if _, err := st.Write(msg); err != nil {
		return err
	}
	var resp errorResp
	if err := readJSON(st, &resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// remoteIP is the agent's address for the API.
func (s *session) remoteIP() string {
	if !s.remote.IsValid() {
		h, _, _ := net.SplitHostPort(s.conn.RemoteAddr().String())
		return h
	}
	return s.remote.Addr().Unmap().String()
}

// firstLine is s up to its first line break: a refusal's code and reason, without the lines
// naming the credential.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
