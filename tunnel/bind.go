package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/plan"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// bindError is a refused bind: the code and the message the agent shows.
type bindError struct {
	code int
	msg  string
}

func refuse(code int, format string, args ...any) *bindError {
	return &bindError{code: code, msg: fmt.Sprintf(format, args...)}
}

func (e *bindError) text() string { return errorText(e.code, "%s", e.msg) }

// bind handles a Bind: it works out the public name or address, checks it against the
// credential's ACL, the account's reservations, edges and online endpoints (in that order),
// builds the stages of the bind's options and registers the tunnel.
func (s *session) bind(m *bindMsg) bindResp {
	opts := m.Opts
	if len(opts) == 0 || string(opts) == "null" {
		opts = json.RawMessage("{}")
	}
	resp := bindResp{ID: m.ID, Proto: m.Proto, Opts: opts}
	if berr := s.admitQuota(bindKind(m), s.gw.rebinds.retakes(s, m.Extra.Token, nil)); berr != nil {
		resp.Error = berr.text()
		return resp
	}
	t, echo, berr := s.prepareBind(m)
	if berr != nil {
		resp.Error = berr.text()
		return resp
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	for tries := 1; ; tries++ {
		berr = s.register(ctx, t)
		// A random port another replica's tunnel took meanwhile (its row is in the store, not
		// yet in this replica's directory) is not the agent's problem: take another.
		if berr == nil || !t.randomPort || berr.code != ep.AgentCodeOnline || tries == maxRandomPortTries {
			break
		}
		t.triedAddrs = append(t.triedAddrs, t.addr)
		if berr = s.resolveAddr(t, &bindOpts{}); berr != nil {
			break
		}
	}
	if berr != nil {
		resp.Error = berr.text()
		return resp
	}
	if t.randomPort {
		echo, _ = echoOpts(m.Opts, t.url) // the URL of the port taken
	}
	resp.ID, resp.URL, resp.Opts = t.id, t.url, echo
	resp.Extra.Token = t.rowID
	return resp
}

// maxRandomPortTries bounds the ports a random-port tcp bind tries when other replicas' tunnels
// take the ones it chose.
const maxRandomPortTries = 4

// prepareBind turns a Bind into an unregistered tunnel and the options to echo.
func (s *session) prepareBind(m *bindMsg) (*Tunnel, json.RawMessage, *bindError) {
	switch m.Proto {
	case "http", "https", "tcp", "tls":
	default:
		return nil, nil, refuse(ep.AgentCodeBadProto, "%q is not a supported tunnel protocol; edgeplane serves http, https, tcp and tls.", m.Proto)
	}
	if len(m.ID) > 128 {
		return nil, nil, refuse(ep.AgentCodeBadBind, "The bind id is longer than 128 characters.")
	}
	// The policy's endpoint is filled in below, once the name is resolved: before the tunnel is
	// registered, so before any traffic reads it.
	endpoint := &trafficpolicy.Endpoint{Account: s.cred.AccountID, Protocol: m.Proto}
	o, mods, berr := buildModules(m.Proto, m.Opts, plan.BindEnv{Env: s.gw.cfg.Env, Endpoint: endpoint, Log: s.gw.cfg.PolicyLog})
	if berr != nil {
		return nil, nil, berr
	}
	t := &Tunnel{id: m.ID, sess: s, proto: m.Proto, forwardsTo: m.ForwardsTo, metadata: m.Extra.Metadata,
		pooled: m.Extra.PoolingEnabled, chain: mods.chain, policy: mods.policy, tls: mods.tls, started: time.Now(),
		passthrough: mods.passthrough, opts: m.Opts}
	if t.id == "" {
		t.id, _ = ep.NewID("tn")
	}
	// The bind token edgeplane gave is the tunnel's API id; a reconnecting agent sends it back
	// and its tunnel keeps its id.
	if ep.ValidID("tn", m.Extra.Token) {
		t.rowID = m.Extra.Token
	} else {
		t.rowID, _ = ep.NewID("tn")
	}
	internal, berr := internalBinding(m, o)
	switch {
	case berr != nil:
		return nil, nil, berr
	case internal:
		if berr := s.resolveInternal(t, o); berr != nil {
			return nil, nil, berr
		}
	case m.Proto == "tcp":
		if berr := s.resolveAddr(t, o); berr != nil {
			return nil, nil, berr
		}
	default:
		if berr := s.resolveName(t, o); berr != nil {
			return nil, nil, berr
		}
	}
	fillEndpoint(endpoint, t.rowID, t.url, t.host, t.addr)
	echo, err := echoOpts(m.Opts, t.url)
	if err != nil {
		return nil, nil, refuse(ep.AgentCodeBadBind, "The bind options are not a JSON object.")
	}
	return t, echo, nil
}

// echoOpts returns the agent's options as it sent them, with URL set to the public URL: Rust
// clients decode the echo strictly and read their own options back from it, and Go clients send
// it again verbatim on reconnect.
func echoOpts(raw json.RawMessage, publicURL string) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, err
		}
	}
	u, _ := json.Marshal(publicURL)
	fields["URL"] = u
	return json.Marshal(fields)
}

// resolveName works out the hostname of an http, https or tls bind and checks it.
func (s *session) resolveName(t *Tunnel, o *bindOpts) *bindError {
	name, berr := o.hostname(t.proto, s.gw.cfg.Settings)
	if berr != nil {
		return berr
	}
	random := name == ""
	if random {
		name = randomName(s.gw.cfg.Settings)
	}
	if !ep.ValidHostname(name, false) {
		return refuse(ep.AgentCodeBadName, "%q is not a valid hostname.", name)
	}
	if ok, _ := ep.ACLPermits(s.currentACL(), ep.ACLTarget{Name: name}); !ok {
		return refuse(ep.AgentCodeACLName, "The credential ACL policy does not permit binding this name.\nCredential ID: %s\nName: %s", s.cred.ID, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if !random {
		res, berr := s.reservedName(ctx, name)
		if berr != nil {
			return berr
		}
		t.reservation = res
	}
	if _, _, found, err := s.gw.cfg.Store.ClaimHolder(ctx, ep.ClaimHostport, name+":443"); err != nil {
		return refuse(ep.AgentCodeBadBind, "edgeplane cannot check the name right now; try again shortly.")
	} else if found {
		return refuse(ep.AgentCodeEdgeHostport, "The host %s and port 443 you requested is already reserved by an edge.", name)
	}
	t.host = name
	t.url = t.proto + "://" + name
	return nil
}

// reservedName finds the reserved domain of the account that covers name (itself, or the
// wildcard above it), or accepts a name under a service domain that no account reserved.
func (s *session) reservedName(ctx context.Context, name string) (string, *bindError) {
	for _, claim := range ep.DomainClaimsFor(name) {
		account, obj, found, err := s.gw.cfg.Store.ClaimHolder(ctx, ep.ClaimDomain, claim)
		if err != nil {
			return "", refuse(ep.AgentCodeBadBind, "edgeplane cannot check the name right now; try again shortly.")
		}
		if !found {
			continue
		}
		if account == s.cred.AccountID {
			return obj, nil
		}
		return "", refuse(ep.AgentCodeNotReserved, "The domain %s is reserved by another account.", name)
	}
	for _, sd := range s.gw.cfg.Settings.ServiceDomains {
		if strings.HasSuffix(name, "."+sd) {
			return "", nil
		}
	}
	return "", refuse(ep.AgentCodeNotReserved, "You must reserve a custom hostname before you can bind it: reserve %s (POST /reserved_domains) or use a name under %s.",
		name, strings.Join(s.gw.cfg.Settings.ServiceDomains, ", "))
}

// randomName is a random hostname under the first service domain.
func randomName(st ep.Settings) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 12)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(letters))))
		b[i] = letters[n.Int64()]
	}
	return string(b) + "." + st.ServiceDomains[0]
}

// resolveAddr works out the public address of a tcp bind, checks it, and opens its listener.
func (s *session) resolveAddr(t *Tunnel, o *bindOpts) *bindError {
	if s.gw.cfg.ListenTCP == nil {
		return refuse(ep.AgentCodeBadProto, "TCP endpoints are turned off on this server.")
	}
	addr := o.Addr
	if addr == "" && o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || u.Scheme != "tcp" || u.Host == "" {
			return refuse(ep.AgentCodeBadBind, "The URL %q is not a tcp://host:port URL.", o.URL)
		}
		addr = u.Host
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if addr == "" {
		if ok, _ := ep.ACLPermits(s.currentACL(), ep.ACLTarget{RandomTCP: true}); !ok {
			return refuse(ep.AgentCodeACLRandomTCP, "The credential ACL policy does not permit binding random TCP addresses.\nCredential ID: %s", s.cred.ID)
		}
		st := s.gw.cfg.Settings
		span := st.TCPPortMax - st.TCPPortMin + 1
		// At most 32 ports at random; a range of fewer is tried whole, from a random start.
		first, _ := rand.Int(rand.Reader, big.NewInt(int64(span)))
		for i := range min(span, 32) {
			n := (first.Int64() + int64(i)) % int64(span)
			if span > 32 {
				pick, _ := rand.Int(rand.Reader, big.NewInt(int64(span)))
				n = pick.Int64()
			}
			port := st.TCPPortMin + int(n)
			a := st.TCPHost + ":" + strconv.Itoa(port)
			if _, _, found, err := s.gw.cfg.Store.ClaimHolder(ctx, ep.ClaimAddr, a); err != nil || found {
				continue
			}
			if s.gw.Online("tcp", a) || slices.Contains(t.triedAddrs, a) { // here or on another replica
				continue
			}
			if s.gw.cfg.Awaited != nil && s.gw.cfg.Awaited(port) {
				continue
			}
			t.addr = a
			l, err := s.gw.ports.acquireRandom(a, s.cred.AccountID)
			if err != nil {
				continue // in use, by another program or for another account's endpoint
			}
			t.listener, t.url, t.randomPort, t.drawnPort = l, "tcp://"+a, true, true
			return nil
		}
		return refuse(ep.AgentCodeNoTCPPort, "No free TCP port is left in %d-%d; try again or reserve an address.", st.TCPPortMin, st.TCPPortMax)
	}
	addr = strings.ToLower(addr)
	host, portText, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(portText)
	if err != nil || host == "" || perr != nil || port < 1 || port > 65535 {
		return refuse(ep.AgentCodeBadBind, "The address %q is not host:port.", addr)
	}
	account, obj, found, err := s.gw.cfg.Store.ClaimHolder(ctx, ep.ClaimAddr, addr)
	if err != nil {
		return refuse(ep.AgentCodeBadBind, "edgeplane cannot check the address right now; try again shortly.")
	}
	// A reconnecting agent sends a random port's bind again with the address it was given
	// (ngrok-go in the URL of the options echoed to it): the port is its own only while its
	// session holds that bind's row, taken over on its return. Else any account could pick
	// another's port while its agent reconnects.
	back := !found && s.gw.rebinds.holds(s, endpointKey{"tcp", addr})
	target := ep.ACLTarget{Addr: addr}
	if back {
		target = ep.ACLTarget{RandomTCP: true}
	}
	if ok, _ := ep.ACLPermits(s.currentACL(), target); !ok {
		if back {
			return refuse(ep.AgentCodeACLRandomTCP, "The credential ACL policy does not permit binding random TCP addresses.\nCredential ID: %s", s.cred.ID)
		}
		return refuse(ep.AgentCodeACLAddr, "The credential ACL policy does not permit binding this address.\nCredential ID: %s\nAddress: %s", s.cred.ID, addr)
	}
	if !back && (!found || account != s.cred.AccountID) {
		if o.Addr == "" {
			return refuse(ep.AgentCodeAddrNotReserved, "The TCP address %s of the URL is not a reserved address of your account, nor a random address this agent still holds (one is held for %v after its agent's link drops): listen again without it for a new random address, or reserve one with POST /reserved_addrs.", addr, s.gw.moveWait)
		}
		return refuse(ep.AgentCodeAddrNotReserved, "The TCP address %s is not a reserved address of your account: reserve one with POST /reserved_addrs.", addr)
	}
	if _, _, used, err := s.gw.cfg.Store.ClaimHolder(ctx, ep.ClaimHostport, addr); err == nil && used {
		return refuse(ep.AgentCodeEdgeHostport, "The host %s and port %d you requested is already reserved by an edge.", host, port)
	}
	t.addr, t.reservation, t.url, t.drawnPort = addr, obj, "tcp://"+addr, back
	return nil
}

// register checks that the credential's ACL still permits the tunnel and that the endpoint is
// not online here already (unless pooled, and then only for the same account), records the
// tunnel's row (which the store refuses while another account holds its name, on any replica),
// opens a reserved address's listener and makes it reachable. The row comes before the registry,
// so that a name another account holds on another replica is never reachable here, not even for
// a moment.
func (s *session) register(ctx context.Context, t *Tunnel) *bindError {
	s.mu.Lock()
	if _, dup := s.tunnels[t.id]; dup {
		s.mu.Unlock()
		return refuse(ep.AgentCodeOnline, "This session already has a tunnel with id %s.", t.id)
	}
	// Under the lock the credential check takes to narrow the ACL: a bind that read the old ACL
	// is either seen by that check or sees the new ACL here. The session's quotas are checked
	// under it too, so binds racing on one session cannot pass them together.
	berr := s.permits(s.acl, t)
	if berr == nil {
		berr = s.overSession(t.kind())
	}
	if berr != nil {
		s.mu.Unlock()
		if t.listener != nil {
			t.listener.Close() // a random port's, opened while choosing it
		}
		return berr
	}
	s.tunnels[t.id] = t
	s.mu.Unlock()
	// A bind of a row this session took over is pending no more once this returns, made or
	// refused: whatever waits for it stops waiting.
	s.gw.rebinds.adopt(s, t)
	defer s.gw.rebinds.bound(t.rowID)
	undo := func() {
		s.mu.Lock()
		delete(s.tunnels, t.id)
		s.mu.Unlock()
		if t.listener != nil {
			t.listener.Close()
		}
	}
	// What this replica refuses writes no row (the row's id may be an online tunnel's, which
	// a reconnecting agent presents again while its old session lingers here).
	conflict, first, wrote := s.gw.Registry.Conflict(t), false, false
	rowAt, rowTook := time.Now(), time.Duration(0)
	if conflict == "" {
		berr := s.putTunnelRow(ctx, t)
		rowTook = time.Since(rowAt)
		if berr != nil {
			undo()
			return berr
		}
		wrote = true
		conflict, first = s.gw.Registry.add(t) // a conflict now is a bind that raced this one
	}
	unrow := func() {
		if !wrote {
			return
		}
		if err := s.gw.cfg.Store.DeleteAgentTunnel(ctx, t.rowID, s.id, s.connID); err != nil {
			s.gw.log.Warn("cannot delete a tunnel row", "tunnel", t.rowID, "err", err)
		}
	}
	if conflict != "" {
		undo()
		unrow()
		if conflict == "quota-tcp" || conflict == "quota-labeled" {
			return accountRefusal(s.gw.cfg.Quotas, t.kind())
		}
		return conflictRefusal(t, conflict)
	}
	if t.opensPort() && first {
		l := t.listener // a random port's, opened while choosing it
		if h, ok := l.(*portHandle); ok {
			h.confirm() // its row is written: the port serves this account
		} else if l == nil {
			h, err := s.gw.ports.acquire(t.addr, s.cred.AccountID)
			if err != nil {
				s.gw.Registry.remove(t)
				undo()
				unrow()
				port, _ := portOf(t.addr)
				return refuse(ep.AgentCodeBadBind, "edgeplane cannot listen on port %d for %s: %v", port, t.url, err)
			}
			l = h
		}
		t.listener = nil // the registry owns it from here, for every bind of the endpoint
		s.gw.Registry.setTCPListener(t.addr, l)
	}
	s.gw.log.Info("tunnel online", "session", s.id, "tunnel", t.id, "url", t.url, "labels", t.labels,
		"row_write", ms(rowTook), "since_accept", ms(time.Since(s.accepted)))
	return nil
}

// conflictRefusal is the refusal of a bind that conflicts with a bind of its endpoint online
// here or on another replica: another account's ("account"), one that does not pool ("online"),
// the other pooling ("pool-mix"), other TLS settings ("pool-tls").
func conflictRefusal(t *Tunnel, conflict string) *bindError {
	switch conflict {
	case "account":
		return refuse(ep.AgentCodeOnline, "The endpoint '%s' is already online for another account.", t.url)
	case "pool-mix":
		return refuse(ep.AgentCodePoolMix, "The endpoint '%s' is online with pooling %s; every bind of a pooled endpoint must enable pooling.", t.url, map[bool]string{true: "disabled", false: "enabled"}[t.pooled])
	case "pool-tls":
		return refuse(ep.AgentCodeOnline, "The endpoint '%s' is online with other TLS settings (mutual TLS CAs, TLS termination or its certificate); every pooled bind of an endpoint must give the same, since the TLS handshake comes before the choice of a bind.", t.url)
	}
	return refuse(ep.AgentCodeOnline, "The endpoint '%s' is already online. Either\n1. stop your existing endpoint first, or\n2. start both endpoints with pooling enabled to load balance between them.", t.url)
}

// label handles StartTunnelWithLabel: a tunnel for edges' tunnel-group backends.
func (s *session) label(m *labelMsg) labelResp {
	if len(m.Labels) == 0 {
		return labelResp{Error: errorText(ep.AgentCodeNoLabels, "A labeled tunnel needs at least one label.")}
	}
	if len(m.Labels) > 32 {
		return labelResp{Error: errorText(ep.AgentCodeBadBind, "A labeled tunnel has at most 32 labels.")}
	}
	for k, v := range m.Labels {
		if k == "" || len(k) > 256 || len(v) > 256 {
			return labelResp{Error: errorText(ep.AgentCodeBadBind, "Label %q is empty or longer than 256 characters.", k)}
		}
	}
	if q := s.gw.cfg.Quotas.LabelBytes; q > 0 && labelBytes(m.Labels) > q {
		return labelResp{Error: errorText(ep.AgentCodeBadBind, "The labels take %d bytes (keys and values); a labeled tunnel's labels may take at most %d (--agent-max-label-bytes).", labelBytes(m.Labels), q)}
	}
	if ok, refused := ep.ACLPermits(s.currentACL(), ep.ACLTarget{Labels: m.Labels}); !ok {
		return labelResp{Error: errorText(ep.AgentCodeACLLabel, "The credential ACL policy does not permit binding this label.\nCredential ID: %s\nLabel: %s", s.cred.ID, refused)}
	}
	if berr := s.admitQuota(kindLabeled, s.gw.rebinds.retakes(s, "", m.Labels)); berr != nil {
		return labelResp{Error: berr.text()}
	}
	t := &Tunnel{sess: s, labels: m.Labels, forwardsTo: m.ForwardsTo, metadata: m.Metadata, started: time.Now()}
	t.id, _ = ep.NewID("tn")
	t.rowID = t.id
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if berr := s.register(ctx, t); berr != nil {
		return labelResp{Error: berr.text()}
	}
	return labelResp{ID: t.id}
}

// permits checks a tunnel against the credential's ACL acl, with the refusal its bind gets.
func (s *session) permits(acl []string, t *Tunnel) *bindError {
	switch {
	case t.proto == "":
		if ok, refused := ep.ACLPermits(acl, ep.ACLTarget{Labels: t.labels}); !ok {
			return refuse(ep.AgentCodeACLLabel, "The credential ACL policy does not permit binding this label.\nCredential ID: %s\nLabel: %s", s.cred.ID, refused)
		}
	case t.internal:
		if ok, _ := ep.ACLPermits(acl, ep.ACLTarget{Name: t.host}); !ok {
			return refuse(ep.AgentCodeACLName, "The credential ACL policy does not permit binding this name.\nCredential ID: %s\nName: %s", s.cred.ID, t.host)
		}
	case t.proto == "tcp" && t.reservation == "":
		if ok, _ := ep.ACLPermits(acl, ep.ACLTarget{RandomTCP: true}); !ok {
			return refuse(ep.AgentCodeACLRandomTCP, "The credential ACL policy does not permit binding random TCP addresses.\nCredential ID: %s", s.cred.ID)
		}
	case t.proto == "tcp":
		if ok, _ := ep.ACLPermits(acl, ep.ACLTarget{Addr: t.addr}); !ok {
			return refuse(ep.AgentCodeACLAddr, "The credential ACL policy does not permit binding this address.\nCredential ID: %s\nAddress: %s", s.cred.ID, t.addr)
		}
	default:
		if ok, _ := ep.ACLPermits(acl, ep.ACLTarget{Name: t.host}); !ok {
			return refuse(ep.AgentCodeACLName, "The credential ACL policy does not permit binding this name.\nCredential ID: %s\nName: %s", s.cred.ID, t.host)
		}
	}
	return nil
}
