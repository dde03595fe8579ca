package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/ingress"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/tunnel"
)

// Isolation between accounts on the data plane: how much of the public listeners' slots one
// account's traffic may hold, how long a public client may take to start and a carried
// connection may stay quiet, how long a request's body may pause, the quotas on what agents bind, and the log of connections closed
// to make room.

// Defaults of the bind quotas: far above what a real agent binds (ngrok's paid plans start at a
// few endpoints per session), low enough that one session or account cannot take the TCP port
// range or the replica's memory.
const (
	defaultBindsPerSession   = 1000
	defaultBindsPerAccount   = 10000
	defaultTCPPerSession     = 100
	defaultTCPPerAccount     = "10%" // of --tcp-port-range
	defaultLabeledPerSession = 500
	defaultLabeledPerAccount = 2000
	defaultLabelBytes        = 4096
	// maxWindowBudgetMiB bounds --agent-window-budget-mib so that its bytes fit an int64 with
	// room to spare; no machine buffers more.
	maxWindowBudgetMiB = 1 << 20
	// defaultPublicPerAccount is one account's share of --public-max-connections.
	defaultPublicPerAccount = "50%"
)

// isolationFlags are serve's flags that keep one account's agents and clients from starving
// the others.
type isolationFlags struct {
	publicPerAccount, tcpPerAccount     *string // a number, or a share like 50%
	headerTimeout, tcpIdle, bodyTimeout *string
	bindsPerSession, bindsPerAccount,
	tcpPerSession, labeledPerSession, labeledPerAccount, labelBytes *int
	windowBudgetMiB *int
	fs              *flag.FlagSet
}

func addIsolationFlags(fs *flag.FlagSet) *isolationFlags {
	return &isolationFlags{
		publicPerAccount: fs.String("public-max-connections-per-account", env("EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_ACCOUNT", defaultPublicPerAccount),
			"most public connections one account's endpoints and edges hold at once, a number or a share of --public-max-connections like 50%; beyond it a TCP connection is closed at once, a TLS one after its ClientHello, and an HTTP request is answered 429 ERR_NGROK_714; 0 for no limit (env EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_ACCOUNT)"),
		headerTimeout: fs.String("public-header-timeout", env("EDGEPLANE_PUBLIC_HEADER_TIMEOUT", ingress.DefaultHeaderTimeout.String()),
			"longest a public client may take to send an HTTP request head, or its TLS ClientHello and handshake (env EDGEPLANE_PUBLIC_HEADER_TIMEOUT)"),
		bodyTimeout: fs.String("public-body-timeout", env("EDGEPLANE_PUBLIC_BODY_TIMEOUT", ingress.DefaultBodyTimeout.String()),
			"longest a public HTTP request's body may wait for the client's next bytes (between reads, not for the whole body: an upload that keeps moving is never cut); past it the request is answered 408 ERR_NGROK_3220 (or cut, once its answer started), its stream to the agent and its connection closed (env EDGEPLANE_PUBLIC_BODY_TIMEOUT)"),
		tcpIdle: fs.String("public-tcp-idle-timeout", env("EDGEPLANE_PUBLIC_TCP_IDLE_TIMEOUT", ingress.DefaultTCPIdleTimeout.String()),
			"a connection of a TCP or TLS endpoint or edge that moves no byte either way for this long is closed (env EDGEPLANE_PUBLIC_TCP_IDLE_TIMEOUT)"),
		bindsPerSession: fs.Int("agent-max-binds-per-session", envInt("EDGEPLANE_AGENT_MAX_BINDS_PER_SESSION", defaultBindsPerSession),
			"most tunnels (binds and labeled tunnels) one agent session holds online; more are refused with ERR_NGROK_324; 0 for no limit (env EDGEPLANE_AGENT_MAX_BINDS_PER_SESSION)"),
		bindsPerAccount: fs.Int("agent-max-binds-per-account", envInt("EDGEPLANE_AGENT_MAX_BINDS_PER_ACCOUNT", defaultBindsPerAccount),
			"most tunnels one account holds online on all replicas together; more are refused with ERR_NGROK_5000; 0 for no limit (env EDGEPLANE_AGENT_MAX_BINDS_PER_ACCOUNT)"),
		tcpPerSession: fs.Int("agent-max-tcp-ports-per-session", envInt("EDGEPLANE_AGENT_MAX_TCP_PORTS_PER_SESSION", defaultTCPPerSession),
			"most TCP endpoints one agent session binds; more are refused with ERR_NGROK_324; 0 for no limit (env EDGEPLANE_AGENT_MAX_TCP_PORTS_PER_SESSION)"),
		tcpPerAccount: fs.String("agent-max-tcp-ports-per-account", env("EDGEPLANE_AGENT_MAX_TCP_PORTS_PER_ACCOUNT", defaultTCPPerAccount),
			"most TCP endpoints (ports) one account holds on this replica, a number or a share of --tcp-port-range like 10%; more are refused with ERR_NGROK_5000; 0 for no limit (env EDGEPLANE_AGENT_MAX_TCP_PORTS_PER_ACCOUNT)"),
		labeledPerSession: fs.Int("agent-max-labeled-tunnels-per-session", envInt("EDGEPLANE_AGENT_MAX_LABELED_TUNNELS_PER_SESSION", defaultLabeledPerSession),
			"most labeled tunnels one agent session holds; more are refused with ERR_NGROK_324; 0 for no limit (env EDGEPLANE_AGENT_MAX_LABELED_TUNNELS_PER_SESSION)"),
		labeledPerAccount: fs.Int("agent-max-labeled-tunnels-per-account", envInt("EDGEPLANE_AGENT_MAX_LABELED_TUNNELS_PER_ACCOUNT", defaultLabeledPerAccount),
			"most labeled tunnels one account holds on this replica; more are refused with ERR_NGROK_5000; 0 for no limit (env EDGEPLANE_AGENT_MAX_LABELED_TUNNELS_PER_ACCOUNT)"),
		labelBytes: fs.Int("agent-max-label-bytes", envInt("EDGEPLANE_AGENT_MAX_LABEL_BYTES", defaultLabelBytes),
			"most bytes of one labeled tunnel's labels, keys and values together; more are refused with ERR_NGROK_301; 0 for no limit beyond 32 labels of 256 bytes (env EDGEPLANE_AGENT_MAX_LABEL_BYTES)"),
		windowBudgetMiB: fs.Int("agent-window-budget-mib", envInt("EDGEPLANE_AGENT_WINDOW_BUDGET_MIB", tunnel.DefaultWindowBudget>>20),
			"MiB that proxy streams' auto-tuned windows may hold beyond the agents' 256 KiB stream window, all sessions together: a download whose public client keeps up grows its window up to 4 MiB out of it, and one account may hold at most half, n accounts 1/(n+1) each; 0 keeps every stream at 256 KiB (env EDGEPLANE_AGENT_WINDOW_BUDGET_MIB)"),
		fs: fs,
	}
}

// isolation is the checked values of the isolation flags.
type isolation struct {
	publicPerAccount, tcpPerAccount     share
	headerTimeout, tcpIdle, bodyTimeout time.Duration
	quotas                              tunnel.Quotas // TCPPerAccount resolved by resolve
	windowBudget                        int64         // bytes (tunnel.Config.WindowBudget)
}

// parse checks the flags; a bad value stops serve with a message naming the flag or its
// variable.
func (f *isolationFlags) parse() (isolation, error) {
	var iso isolation
	for _, c := range []struct {
		name, env string
		v         int
	}{
		{"agent-max-binds-per-session", "EDGEPLANE_AGENT_MAX_BINDS_PER_SESSION", *f.bindsPerSession},
		{"agent-max-binds-per-account", "EDGEPLANE_AGENT_MAX_BINDS_PER_ACCOUNT", *f.bindsPerAccount},
		{"agent-max-tcp-ports-per-session", "EDGEPLANE_AGENT_MAX_TCP_PORTS_PER_SESSION", *f.tcpPerSession},
		{"agent-max-labeled-tunnels-per-session", "EDGEPLANE_AGENT_MAX_LABELED_TUNNELS_PER_SESSION", *f.labeledPerSession},
		{"agent-max-labeled-tunnels-per-account", "EDGEPLANE_AGENT_MAX_LABELED_TUNNELS_PER_ACCOUNT", *f.labeledPerAccount},
		{"agent-max-label-bytes", "EDGEPLANE_AGENT_MAX_LABEL_BYTES", *f.labelBytes},
		{"agent-window-budget-mib", "EDGEPLANE_AGENT_WINDOW_BUDGET_MIB", *f.windowBudgetMiB},
	} {
		if err := atLeast(f.fs, c.name, c.env, c.v, 0); err != nil {
			return iso, err
		}
	}
	if *f.windowBudgetMiB > maxWindowBudgetMiB {
		return iso, fmt.Errorf("--agent-window-budget-mib must be at most %d (1 TiB), got %d", maxWindowBudgetMiB, *f.windowBudgetMiB)
	}
	iso.windowBudget = int64(*f.windowBudgetMiB) << 20
	var err error
	if iso.publicPerAccount, err = parseShare("public-max-connections-per-account", *f.publicPerAccount, "50%"); err != nil {
		return iso, err
	}
	if iso.tcpPerAccount, err = parseShare("agent-max-tcp-ports-per-account", *f.tcpPerAccount, "10%"); err != nil {
		return iso, err
	}
	for _, d := range []struct {
		name, text string
		def        time.Duration
		into       *time.Duration
	}{
		{"public-header-timeout", *f.headerTimeout, ingress.DefaultHeaderTimeout, &iso.headerTimeout},
		{"public-tcp-idle-timeout", *f.tcpIdle, ingress.DefaultTCPIdleTimeout, &iso.tcpIdle},
		{"public-body-timeout", *f.bodyTimeout, ingress.DefaultBodyTimeout, &iso.bodyTimeout},
	} {
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return iso, fmt.Errorf("--%s must be a positive duration like %s, got %q", d.name, d.def, d.text)
		}
		*d.into = v
	}
	iso.quotas = tunnel.Quotas{BindsPerSession: *f.bindsPerSession, BindsPerAccount: *f.bindsPerAccount,
		TCPPerSession: *f.tcpPerSession, LabeledPerSession: *f.labeledPerSession,
		LabeledPerAccount: *f.labeledPerAccount, LabelBytes: *f.labelBytes}
	return iso, nil
}

// resolve sets the quotas that are shares of the deployment's TCP port range.
func (iso *isolation) resolve(settings ep.Settings) tunnel.Quotas {
	q := iso.quotas
	q.TCPPerAccount = iso.tcpPerAccount.of(settings.TCPPortMax - settings.TCPPortMin + 1)
	return q
}

// share is a limit given as a number, or as a percentage of a total.
type share struct {
	n       int
	percent bool
}

// of is the limit for a total; a share of no limit (0) is no limit, and a share of a limit is at
// least 1.
func (s share) of(total int) int {
	if !s.percent {
		return s.n
	}
	if total <= 0 || s.n == 0 {
		return 0
	}
	return max(1, total*s.n/100)
}

// parseShare reads "N" (at least 0) or "P%" (0 to 100) for the flag name.
func parseShare(name, text, example string) (share, error) {
	pct := strings.HasSuffix(text, "%")
	n, err := strconv.Atoi(strings.TrimSuffix(text, "%"))
	if err != nil || n < 0 || pct && n > 100 {
		return share{}, fmt.Errorf("--%s must be a whole number of at least 0 or a percentage like %s, got %q", name, example, text)
	}
	return share{n: n, percent: pct}, nil
}

// logEviction reports the connections closed to make room on a listener, at debug level (a
// flood of them is what eviction is for), once start has given the data plane its logger.
func (d *dataPlane) logEviction(listener string) func(netx.Eviction) {
	return func(ev netx.Eviction) {
		if log := d.log.Load(); log != nil {
			evictionLogger(log, listener)(ev)
		}
	}
}

// evictionLogger logs each connection a listener's limiter closes to admit a new client.
func evictionLogger(log *slog.Logger, listener string) func(netx.Eviction) {
	return func(ev netx.Eviction) {
		log.Debug("connection closed to admit a new client", "listener", listener, "remote", ev.Remote.String(),
			"pending", ev.Pending, "trusted", ev.Trusted, "unproductive", ev.Unproductive.Round(time.Millisecond))
	}
}
