package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/peer"
	"github.com/edgeplane/edgeplane/pki"
	"github.com/edgeplane/edgeplane/store"
	"golang.ngrok.com/ngrok"
)

// cluster is several replicas' gateways in one process, on one SQLite store, each with its
// agent listener, its link to the others and its own loopback address for tcp endpoints (as
// replicas on several hosts listen on the same ports).
type cluster struct {
	t        *testing.T
	st       *store.Store
	ca       *pki.CA
	settings ep.Settings
	tokens   map[string]string // a credential's token, by account name
	accounts map[string]string // account ids, by name
	// awaited is the replicas' Config.Awaited.
	awaited func(port int) bool
	// quotas are the replicas' started after it is set.
	quotas Quotas
	// accepted, when set before a replica starts, is told of each connection its tcp
	// endpoints' listeners accept: on which host and port, counted against which account.
	accepted func(host string, port int, account string)
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "edgeplane.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	certPEM, keyPEM, err := pki.NewCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, st: st, ca: ca, settings: ep.DefaultSettings(), tokens: map[string]string{}, accounts: map[string]string{}}
	c.settings.TCPHost = "127.0.0.1"
	for _, name := range []string{"a", "b"} {
		caller, _, err := st.EnsureAccount(ctx, "acct-"+name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := st.Create(ctx, caller, ep.Credentials, "", &ep.CredentialCreate{})
		if err != nil {
			t.Fatal(err)
		}
		c.tokens[name], c.accounts[name] = *doc.(*ep.Credential).Token, caller.AccountID
	}
	return c
}

// replica is one gateway of a cluster.
type replica struct {
	c         *cluster
	id        string
	gw        *Gateway
	link      *peer.Link
	agentAddr string
	pool      *x509.CertPool
	tcpHost   string
	// peerDrains counts the calls of Config.OnPeerDraining.
	peerDrains atomic.Int64
}

// replica starts a gateway named id whose tcp endpoints listen on tcpHost, with its link
// listening on loopback and its address in its row; interval is its directory's.
func (c *cluster) replica(id, tcpHost string, interval time.Duration) *replica {
	t := c.t
	t.Helper()
	r := &replica{c: c, id: id, tcpHost: tcpHost}
	ident, err := peer.NewIdentity(c.ca.Cert, c.ca.Signer(), id)
	if err != nil {
		t.Fatal(err)
	}
	var gw *Gateway
	r.link, err = peer.New(peer.Config{Identity: ident, Accept: func(ctx context.Context, req peer.Request) (net.Conn, error) {
		return gw.AcceptPeer(ctx, req)
	}})
	if err != nil {
		t.Fatal(err)
	}
	peerLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.link.Serve(peerLn) }()
	if err := c.st.AnnounceReplica(context.Background(), id, peerLn.Addr().String()); err != nil {
		t.Fatal(err)
	}
	cert, pool := selfSigned(t, "agents.test")
	gw = New(Config{Store: c.st, Settings: c.settings, Replica: id, Version: "test", Link: r.link,
		DirectoryInterval: interval, ListenTCP: listenCounting(tcpHost, r.accepted), Awaited: c.awaited, Logger: testLogger(t),
		OnPeerDraining: func() { r.peerDrains.Add(1) }, Quotas: c.quotas,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	r.gw, r.pool = gw, pool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.agentAddr = ln.Addr().String()
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(r.stop)
	return r
}

// accepted tells the cluster's accepted of a connection of the replica's tcp listeners.
func (r *replica) accepted(port int, account string) {
	if r.c.accepted != nil {
		r.c.accepted(r.tcpHost, port, account)
	}
}

// stop ends the replica: its agents' sessions, its link.
func (r *replica) stop() {
	r.gw.Close()
	r.link.Close()
}

// listenOn is ListenTCP on host.
func listenOn(host string) func(int, string, func(net.Conn)) (TCPListener, error) {
	return listenCounting(host, nil)
}

// listenCounting is ListenTCP on host that tells accepted, when set, the account each
// connection counts against as it is accepted (which ingress.ListenTCP's limiter charges).
func listenCounting(host string, accepted func(port int, account string)) func(int, string, func(net.Conn)) (TCPListener, error) {
	return func(port int, account string, serve func(net.Conn)) (TCPListener, error) {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, err
		}
		l := &accountListener{Listener: ln, port: port, accepted: accepted}
		l.SetAccount(account)
		go func() { _ = netx.Serve(l, serve) }()
		return l, nil
	}
}

// accountListener is a tcp endpoint's listener of the tests, with the account it counts
// its connections against.
type accountListener struct {
	net.Listener
	port     int
	account  atomic.Pointer[string]
	accepted func(port int, account string)
}

func (l *accountListener) SetAccount(account string) { l.account.Store(&account) }

func (l *accountListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil && l.accepted != nil {
		l.accepted(l.port, *l.account.Load())
	}
	return c, err
}

// connect opens an agent session of the account on the replica.
func (r *replica) connect(account string) ngrok.Session {
	r.c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := ngrok.Connect(ctx, ngrok.WithServer(r.agentAddr), ngrok.WithCA(r.pool), ngrok.WithAuthtoken(r.c.tokens[account]))
	if err != nil {
		cancel()
		r.c.t.Fatalf("connect to %s: %v", r.id, err)
	}
	r.c.t.Cleanup(func() { sess.Close(); cancel() })
	return sess
}

// serveHTTP answers every request on ln with "<name> <client address>".
func serveHTTP(t *testing.T, ln net.Listener, name string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(acceptguard.Listener{Listener: ln}) }()
	t.Cleanup(func() { srv.Close() })
}

// request sends one HTTP request for host over a connection Dial opened on ep, from client, and
// returns the answer's body.
func request(t *testing.T, e Endpoint, host, client string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.Dial(ctx, client, "http", "", false)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitFor polls cond every 10 ms until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
	}
}

// echoTCP answers every connection accepted on ln with what it reads, prefixed by name.
func echoTCP(t *testing.T, ln net.Listener, name string) {
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					fmt.Fprintf(c, "%s %s", name, line)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
}

// testLogger writes the gateway's log to the test's when -v is given.
func testLogger(t *testing.T) *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
