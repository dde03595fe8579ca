package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/enforce"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/peer"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/store"
)

// TCPListener is a tcp endpoint's public listener (ingress.Server.ListenTCP's). Its port is
// shared by the binds of its address here and on other replicas, and passes from one account
// to another: SetAccount makes the connections it accepts from then on count against the new
// one, keeping its socket open.
type TCPListener interface {
	io.Closer
	SetAccount(account string)
}

// Config is what the gateway needs of its deployment.
type Config struct {
	Store Store
	// TLS is the agent listener's TLS configuration (edgeplane's CA-issued certificate or the
	// operator's).
	TLS *tls.Config
	// Settings supply the service domains (names agents may bind without reserving them, and
	// where random names go) and the public TCP host and port range.
	Settings ep.Settings
	// ListenTCP opens the public listener of an account's tcp bind on port, handing each
	// accepted connection to serve; the public listeners own it (ingress.ListenTCP), and count
	// its connections against the account. Nil refuses tcp binds.
	ListenTCP func(port int, account string, serve func(net.Conn)) (TCPListener, error)
	// Awaited, when set, reports whether port's socket waits for the endpoint that held it
	// before a handover (its agent has not bound it again here yet): a random port's bind
	// leaves such a port alone, or it would take the returning endpoint's socket and port.
	Awaited func(port int) bool
	// TCPIdle ends a public connection of a tcp endpoint once no byte has moved either
	// way for this long; zero never does.
	TCPIdle time.Duration
	// Quotas bound the tunnels sessions and accounts hold online (quota.go).
	Quotas Quotas
	// CarryTCP, when set, carries a public connection of the tcp endpoint t at addr, in place of
	// the gateway: the public listeners then record it like their other traffic.
	CarryTCP func(c net.Conn, t Endpoint, addr string)
	// Replica names this process in the session rows, so every replica's API lists every
	// replica's agents and a dead replica's rows expire.
	Replica string
	// Logger receives the gateway's events; nil discards.
	Logger *slog.Logger
	// Version is edgeplane's version, told to agents in AuthResp.
	Version string
	// WindowBudget is the most bytes beyond the agents' 256 KiB stream window that proxy
	// streams' auto-tuned windows may hold at once, all sessions together (window.go); 0
	// leaves every stream at 256 KiB, as muxado has it.
	WindowBudget int64
	// Link, when not nil, is this replica's link to the other replicas (--peer-listen): the
	// gateway then routes public connections to their tunnels too (the directory, read from
	// Store), and serves their streams for its own (AcceptPeer). Nil: a single server.
	Link *peer.Link
	// OnPeerDraining, when not nil, is called (from the directory's loop) when another replica
	// starts draining after a handover, for the public listeners to close the idle connections
	// they keep to agents: each is an open stream, and would hold an agent's session on the
	// draining replica until its drain timeout.
	OnPeerDraining func()
	// DirectoryInterval is how often the directory polls the replicas table (default
	// DefaultDirectoryInterval).
	DirectoryInterval time.Duration
	// CheckInterval is how often the gateway looks at the store's change feed for accounts whose
	// credentials or reservations changed, and checks their online sessions against the store
	// (default 500ms): a delete through any replica's API takes them offline within it.
	CheckInterval time.Duration
	// Env is the data plane's environment for the modules agents ask for (the sign-in key and
	// managed OAuth applications, the outbound client); nil refuses the options needing it.
	Env *plan.Env
	// PolicyLog receives the records of the log actions of agents' traffic policies; nil
	// refuses a bind whose policy has one.
	PolicyLog *enforce.PolicyLog
}

// Heartbeat and freshness. An agent pings every HeartbeatInterval (10 s by default) and expects
// its echo within its tolerance; edgeplane echoes and drops a session whose agent has not pinged
// within interval + tolerance (heartbeat.go). Session rows are refreshed every touchInterval and count as online for
// store.LiveTolerance after their replica last refreshed them.
const (
	handshakeTimeout = 10 * time.Second
	touchInterval    = 5 * time.Second
	// maxRPCs bounds the requests one session may have in progress at once.
	maxRPCs = 16
)

// Gateway accepts agents on one listener and keeps their tunnels in its Registry.
type Gateway struct {
	// windows is the process-wide budget of proxy streams' grown windows; nil when off.
	windows  *WindowBudget
	cfg      Config
	log      *slog.Logger
	Registry *Registry
	limiter  *authLimiter

	mu       sync.Mutex
	sessions map[*session]struct{}
	// byID indexes sessions by id: every reconnecting agent's Auth looks its id up, thousands
	// at once when a replica restarts, which a scan of sessions would make quadratic.
	byID map[string]*session
	// revoked remembers the credentials whose deletion ended sessions here, by token selector,
	// so their agents' next attempt is told the credential was revoked (ERR_NGROK_300) rather
	// than that the token is unknown. Bounded: forgotten entries fall back to 107.
	revoked map[string]string
	conns   map[net.Conn]struct{}
	// lost are the sessions whose rows wait for their agent's return, with the timer that
	// deletes them (relink.go).
	lost   map[*session]*time.Timer
	closed bool
	wg     sync.WaitGroup
	stop   chan struct{}

	// changes announces the accounts whose credentials, reservations or plan collections
	// changed; fresh holds the sessions authenticated since the last check (under mu), so that
	// a deletion committed while one was authenticating is not missed; lastFull is when every
	// session was last checked (owned by the check loop).
	changes  *store.Subscription
	fresh    []*session
	lastFull time.Time
	// touched is set once this replica has refreshed its row (owned by the refresh loop): the
	// first refresh also forgets sessions of replicas without a row. lastTouch is when a refresh
	// last succeeded: after a longer gap the other replicas may have forgotten this one's rows.
	touched   bool
	lastTouch time.Time
	// ports owns the public listeners of tcp endpoints, local and remote (nil when tcp binds
	// are off); dir is the directory of other replicas' tunnels (nil without a link).
	ports *tcpPorts
	dir   *directory
	// onRemoteChange is told when the directory's view changes (SetOnRemoteChange).
	onRemoteChange func()
	// echoHandover and streamTypeTimeout are the package's, set once by New (tests shorten them
	// before Serve).
	echoHandover, streamTypeTimeout time.Duration
	// moveWait is MoveWait, set by New (tests shorten it); rebinds are the rows this replica's
	// sessions took over and have not bound again (rebind.go).
	moveWait time.Duration
	rebinds  *rebinds
}

// fullCheckEvery is how often every online session is checked whatever the change feed said: it
// makes up for an announcement lost between replicas, like the data plane's periodic rebuild.
const fullCheckEvery = 30 * time.Second

// New makes a gateway; Serve starts it on a listener.
func New(cfg Config) *Gateway {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 500 * time.Millisecond
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger, Registry: NewRegistry(), limiter: newAuthLimiter(),
		sessions: map[*session]struct{}{}, byID: map[string]*session{}, revoked: map[string]string{}, conns: map[net.Conn]struct{}{}, lost: map[*session]*time.Timer{}, stop: make(chan struct{}),
		echoHandover: echoHandover, streamTypeTimeout: streamTypeTimeout, moveWait: MoveWait, rebinds: newRebinds()}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.Registry.quotas = cfg.Quotas
	if cfg.WindowBudget > 0 {
		g.windows = NewWindowBudget(cfg.WindowBudget)
	}
	if cfg.Store != nil {
		g.changes = cfg.Store.SubscribeAgents()
	}
	g.lastFull = time.Now()
	// The first sessions write the replica's row as they come online; a refresh more than a
	// tolerance after the start is a lapse like any other.
	g.lastTouch = time.Now()
	g.every(g.cfg.CheckInterval, g.checkOnce)
	g.every(touchInterval, g.touchOnce)
	g.every(commandPoll, g.commandsOnce)
	if cfg.ListenTCP != nil {
		g.ports = newTCPPorts(cfg.ListenTCP, g.serveTCP)
	}
	if cfg.Link != nil && cfg.Store != nil {
		if cfg.DirectoryInterval <= 0 {
			cfg.DirectoryInterval = DefaultDirectoryInterval
		}
		g.dir = newDirectory(g, cfg.Store, cfg.Link)
		g.pollDirectory(cfg.DirectoryInterval)
	}
	return g
}

// Serve accepts agent connections on ln until it is closed.
func (g *Gateway) Serve(ln net.Listener) error {
	return netx.Serve(ln, func(c net.Conn) {
		if !g.track(c) {
			c.Close()
			return
		}
		g.handle(c)
	})
}

func (g *Gateway) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// handle runs one agent connection: the TLS handshake and then its session, each bounded in
// time until the agent has authenticated.
func (g *Gateway) handle(raw net.Conn) {
	defer g.untrack(raw)
	accepted := time.Now()
	_ = raw.SetDeadline(accepted.Add(handshakeTimeout))
	conn := tls.Server(rawIO(raw), g.cfg.TLS)
	if err := conn.Handshake(); err != nil {
		g.log.Debug("agent TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	_ = raw.SetDeadline(time.Time{})
	s := newSession(g, conn)
	s.accepted = accepted
	s.run()
}

func (g *Gateway) addSession(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.sessions[s] = struct{}{}
	g.byID[s.id] = s
	g.fresh = append(g.fresh, s)
	return true
}

func (g *Gateway) removeSession(s *session) {
	g.mu.Lock()
	delete(g.sessions, s)
	if g.byID[s.id] == s {
		delete(g.byID, s.id)
	}
	g.mu.Unlock()
}

// renameSession gives s the id the store left it (another credential's session held the one
// it presented).
func (g *Gateway) renameSession(s *session, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID[s.id] == s {
		delete(g.byID, s.id)
	}
	s.id = id
	if _, ok := g.sessions[s]; ok {
		g.byID[id] = s
	}
}

// Sessions returns how many agent sessions are authenticated on this replica now. It is for
// metrics, read when they are scraped: counting at that moment costs the agents' path nothing.
func (g *Gateway) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

func (g *Gateway) snapshotSessions() []*session {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*session, 0, len(g.sessions))
	for s := range g.sessions {
		out = append(out, s)
	}
	return out
}

// Session returns the online session of this replica with the API id, or nil.
func (g *Gateway) session(id string) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byID[id]
}

// Close ends every session (agents reconnect elsewhere or later) and stops the background
// loops. The listener is closed by its owner.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	close(g.stop)
	conns := make([]net.Conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for _, s := range g.snapshotSessions() {
		s.close()
	}
	g.dropAllLost()
	g.wg.Wait()
	if g.changes != nil {
		g.changes.Close()
	}
	return nil
}

// every runs f every d in a goroutine of its own until the gateway closes.
func (g *Gateway) every(d time.Duration, f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
			f()
		}
	}()
}

// pollDirectory runs the directory's poll loop: at once, then every completePoll until the
// view is complete (a starting replica waits on it before it serves, DirectoryComplete), and
// every interval after that; and at once when a link to another replica comes up.
func (g *Gateway) pollDirectory(interval time.Duration) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			g.dir.pollOnce()
			next := interval
			select {
			case <-g.dir.complete:
			default:
				next = min(interval, completePoll)
			}
			t := time.NewTimer(next)
			select {
			case <-g.stop:
				t.Stop()
				return
			case <-t.C:
			case <-g.dir.wake:
				t.Stop()
			}
		}
	}()
}

// maxRevoked bounds the memory of revoked credentials.
const maxRevoked = 10000

func (g *Gateway) revoke(credentialID string) {
	_, selector, _ := strings.Cut(credentialID, "_")
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.revoked) >= maxRevoked {
		clear(g.revoked)
	}
	g.revoked[selector] = credentialID
}

// revokedCredential returns the id of the revoked credential a token selector belonged to.
func (g *Gateway) revokedCredential(selector string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	id, ok := g.revoked[selector]
	return id, ok
}

// commandPoll is how often a replica looks for commands other replicas' APIs queued for its
// sessions.
const commandPoll = 250 * time.Millisecond

// commandsOnce carries out the commands queued for this replica's sessions through other
// replicas' APIs, and records each outcome for the asking replica; it runs every commandPoll.
func (g *Gateway) commandsOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmds, err := g.cfg.Store.PendingAgentCommands(ctx, g.cfg.Replica)
	if err != nil {
		g.log.Warn("agent gateway: cannot read queued commands", "err", err)
		return
	}
	for _, c := range cmds {
		outcome := ""
		switch err := g.Command(ctx, c.SessionID, c.Command); {
		case errors.Is(err, ErrNotHere):
			outcome = CommandGone
		case errors.Is(err, ErrUnsupported):
			outcome = CommandUnsupported
		case err != nil:
			outcome = CommandFailed + err.Error()
		}
		if err := g.cfg.Store.FinishAgentCommand(ctx, c.ID, outcome); err != nil {
			g.log.Warn("agent gateway: cannot record a command's outcome", "command", c.ID, "err", err)
		}
	}
}

// Outcomes of a command carried out for another replica ("" when the agent did it).
const (
	CommandGone        = "gone"
	CommandUnsupported = "unsupported"
	CommandFailed      = "failed: "
)

// touchOnce keeps this replica's session rows fresh and forgets those of dead replicas; it runs
// every touchInterval.
func (g *Gateway) touchOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.cfg.Store.TouchAgentSessions(ctx, g.cfg.Replica, time.Now().Add(-store.LiveTolerance), !g.touched); err != nil {
		g.log.Warn("agent gateway: cannot refresh session rows", "err", err)
		return
	}
	// A refresh later than LiveTolerance less one interval after the last one may come after the
	// other replicas counted this one dead and forgot its rows (and with them its agents' holds
	// on their names): write them again, through the checks of a bind.
	lapsed := time.Since(g.lastTouch) > store.LiveTolerance-touchInterval
	g.touched, g.lastTouch = true, time.Now()
	if lapsed {
		g.log.Warn("agent gateway: this replica could not refresh its rows for a while; writing them again")
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		g.reclaim(rctx)
	}
}
