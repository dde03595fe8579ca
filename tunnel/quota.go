package tunnel

import (
	"context"
	"encoding/json"

	ep "github.com/edgeplane/edgeplane"
)

// Quotas bound what agents may hold online, so that one session or one account cannot take the
// TCP port range from the others, nor the memory of the replica: without them one session bound
// 198 of 200 ports, and another made 19,751 binds in 19 s. A zero field means no limit. The
// defaults (serve's flags) are far above what a real agent binds.
type Quotas struct {
	// BindsPerSession bounds the tunnels (endpoint binds and labeled tunnels) of one session;
	// BindsPerAccount those of one account on every replica, counted from the store's tunnel
	// rows (eventually: binds in progress at once on several replicas may each pass).
	BindsPerSession, BindsPerAccount int
	// TCPPerSession bounds the tcp binds of one session; TCPPerAccount the tcp endpoints (each
	// a port of the TCP listen host) one account holds on this replica, whose ports they are.
	TCPPerSession, TCPPerAccount int
	// LabeledPerSession and LabeledPerAccount bound the labeled tunnels of one session and of
	// one account on this replica (a tunnel-group backend looks through the account's on every
	// request).
	LabeledPerSession, LabeledPerAccount int
	// LabelBytes bounds the bytes of one labeled tunnel's labels, keys and values together.
	LabelBytes int
}

// tunnelKind is what a quota counts a tunnel as, beside being a tunnel.
type tunnelKind int

const (
	kindEndpoint tunnelKind = iota // an http, https or tls bind
	kindTCP                        // a tcp bind
	kindLabeled                    // a labeled tunnel
)

// kind is what the quotas count t as: an internal tcp endpoint opens no port, so it counts as
// an endpoint.
func (t *Tunnel) kind() tunnelKind {
	if t.internal {
		return kindEndpoint
	}
	return kindOf(t.proto)
}

// bindKind is what the quotas count a Bind as before it is prepared: a tcp bind on an internal
// name (its URL's or address's host) opens no port.
func bindKind(m *bindMsg) tunnelKind {
	if m.Proto != "tcp" {
		return kindOf(m.Proto)
	}
	var o bindOpts
	if json.Unmarshal(m.Opts, &o) == nil && ep.IsInternalHost(o.rawHost()) {
		return kindEndpoint
	}
	return kindTCP
}

func kindOf(proto string) tunnelKind {
	switch proto {
	case "tcp":
		return kindTCP
	case "":
		return kindLabeled
	}
	return kindEndpoint
}

// overSession refuses a new tunnel of kind when the session holds as many as its quotas allow;
// s.mu must be held. The tunnels being registered count already (register puts them in
// s.tunnels first), so binds racing on one session cannot pass the limit together.
func (s *session) overSession(kind tunnelKind) *bindError {
	q := s.gw.cfg.Quotas
	binds, tcp, labeled := len(s.tunnels), 0, 0
	for _, t := range s.tunnels {
		switch t.kind() {
		case kindTCP:
			tcp++
		case kindLabeled:
			labeled++
		}
	}
	switch {
	case q.BindsPerSession > 0 && binds >= q.BindsPerSession:
		return refuse(ep.AgentCodeSessionLimit, "Your account may not run more than %d endpoints (tunnels, labeled ones included) over a single ngrok agent session (--agent-max-binds-per-session).", q.BindsPerSession)
	case kind == kindTCP && q.TCPPerSession > 0 && tcp >= q.TCPPerSession:
		return refuse(ep.AgentCodeSessionLimit, "Your account may not run more than %d TCP endpoints over a single ngrok agent session (--agent-max-tcp-ports-per-session).", q.TCPPerSession)
	case kind == kindLabeled && q.LabeledPerSession > 0 && labeled >= q.LabeledPerSession:
		return refuse(ep.AgentCodeSessionLimit, "Your account may not run more than %d labeled tunnels over a single ngrok agent session (--agent-max-labeled-tunnels-per-session).", q.LabeledPerSession)
	}
	return nil
}

// accountRefusal is the refusal of a tunnel the registry found over the account's quota of its
// kind on this replica (Registry.add's conflicts "quota-tcp" and "quota-labeled").
func accountRefusal(q Quotas, kind tunnelKind) *bindError {
	if kind == kindTCP {
		return refuse(ep.AgentCodeAccountLimit, "Your account is limited to %d TCP endpoints on this server (--agent-max-tcp-ports-per-account).", q.TCPPerAccount)
	}
	return refuse(ep.AgentCodeAccountLimit, "Your account is limited to %d labeled tunnels on this server (--agent-max-labeled-tunnels-per-account).", q.LabeledPerAccount)
}

// admitQuota checks a new tunnel of proto ("" for a labeled one) against the quotas before any
// work is done for it (a random TCP port is opened, names are looked up): the session's, the
// account's on this replica, and the account's tunnels on every replica. register checks the
// session's and this replica's again as it registers the tunnel, atomically. A tunnel that
// retakes a row its session took over from the agent's previous one (rebinds.retakes) is not
// counted against the account's tunnels on every replica: its row is among them already, and
// an account at its quota would otherwise lose its tunnels each time its agent moves.
func (s *session) admitQuota(kind tunnelKind, retakes bool) *bindError {
	q := s.gw.cfg.Quotas
	s.mu.Lock()
	berr := s.overSession(kind)
	s.mu.Unlock()
	if berr != nil {
		return berr
	}
	account := s.cred.AccountID
	if tcp, labeled := s.gw.Registry.held(account); kind == kindTCP && q.TCPPerAccount > 0 && tcp >= q.TCPPerAccount ||
		kind == kindLabeled && q.LabeledPerAccount > 0 && labeled >= q.LabeledPerAccount {
		return accountRefusal(q, kind)
	}
	if q.BindsPerAccount <= 0 || s.gw.cfg.Store == nil || retakes {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	n, err := s.gw.cfg.Store.CountAgentTunnels(ctx, account)
	if err != nil {
		return refuse(ep.AgentCodeBadBind, "edgeplane cannot count your account's tunnels right now; try again shortly.")
	}
	if n >= q.BindsPerAccount {
		return refuse(ep.AgentCodeAccountLimit, "Your account is limited to %d online endpoints (tunnels, labeled ones included) (--agent-max-binds-per-account).", q.BindsPerAccount)
	}
	return nil
}

// labelBytes is the size of a labeled tunnel's labels, keys and values together.
func labelBytes(labels map[string]string) int {
	n := 0
	for k, v := range labels {
		n += len(k) + len(v)
	}
	return n
}
