package agents

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// reconnectHolder is an agent's dialer through a relay that ends the agent's TLS with a
// certificate of its own (in pool, which the agent trusts) and opens its own to edgeplane's
// agent listener. On every connection but the first it holds edgeplane's first words (its
// answer to Auth) for hold: edgeplane has taken the session over by then, and the agent binds
// again only once it has the answer, as a slow agent on a starved machine would.
type reconnectHolder struct {
	pool         *x509.CertPool
	conns, holds atomic.Int64
	released     atomic.Int64
}

func newReconnectHolder(t *testing.T, w *world, hold time.Duration) (*reconnectHolder, string) {
	t.Helper()
	cert := selfSigned(t, "agents.test")
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	h := &reconnectHolder{pool: x509.NewCertPool()}
	h.pool.AddCert(leaf)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			agent, err := ln.Accept()
			if err != nil {
				return
			}
			held := h.conns.Add(1) > 1
			go func() {
				defer agent.Close()
				up, err := tls.Dial("tcp", w.agent, &tls.Config{RootCAs: w.ca})
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, agent); up.Close() }()
				first := make([]byte, 64<<10)
				n, err := up.Read(first)
				if err != nil {
					return
				}
				if held {
					h.holds.Add(1)
					time.Sleep(hold)
				}
				if _, err := agent.Write(first[:n]); err != nil {
					return
				}
				if held {
					h.released.Add(1)
				}
				_, _ = io.Copy(agent, up)
			}()
		}
	}()
	return h, ln.Addr().String()
}

// TestHandoverLabeledTunnelUnderLoad: two accounts each have an HTTPS edge whose tunnel group
// has the same labels, served by a labeled tunnel of their own agent, with public requests in a
// loop; serve hands over to a new process. Account a's agent gets the new process's answer to
// its Auth only 3 s after the new process took its session over (longer than the 2 s a
// handover's fixed wait gives): its edge's requests wait while its tunnel's row says it is
// moving, and not one fails. Account b's agent, with the same labels, comes back at once; its
// requests do not fail either, and neither loop is ever answered by the other account's agent.
func TestHandoverLabeledTunnelUnderLoad(t *testing.T) {
	w := start(t, "--drain-timeout", "10s")
	wb := w.asAccount("labeled-mover-b")
	moverEdge(t, w, "mover-a.example.com")
	moverEdge(t, wb, "mover-b.example.com")
	_, tokenA := w.credential()
	_, tokenB := wb.credential()
	holder, relay := newReconnectHolder(t, w, 3*time.Second)
	serveMover(t, w.mustConnect(tokenA, holder.options(relay)...), "account-a")
	serveMover(t, wb.mustConnect(tokenB), "account-b")

	client := w.httpsClient()
	urls := map[string]string{"account-a": "https://mover-a.example.com/", "account-b": "https://mover-b.example.com/"}
	for name, url := range urls {
		eventually(t, 5*time.Second, name+"'s edge serves", func() bool { return fetch(client, url, name+" agent") == nil })
	}
	loopA := startLoop(client, urls["account-a"], "account-a agent", 2)
	loopB := startLoop(client, urls["account-b"], "account-b agent", 2)
	waitRequests(t, 4, loopA, loopB)

	newRestarter(w).handover(t)
	eventually(t, 20*time.Second, "account a's agent gets its held answer", func() bool { return holder.released.Load() > 0 })
	waitRequests(t, 4, loopA, loopB) // the loops go on against the tunnels bound again
	loopA.stop(t)
	loopB.stop(t)
	if holder.holds.Load() == 0 {
		t.Error("account a's agent did not reconnect through the relay that holds it")
	}
}

// moverEdge creates an HTTPS edge for host whose one route goes to a tunnel group of the
// labels edge=mover, the same for every account.
func moverEdge(t *testing.T, w *world, host string) {
	t.Helper()
	w.reserveDomain(host)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "mover"}})
	e := w.mustCreate("/edges/https", map[string]any{"hostports": []string{host + ":443"}})
	w.mustCreate("/edges/https/"+e+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
}

// serveMover starts a labeled tunnel edge=mover on sess, answering "<name> agent".
func serveMover(t *testing.T, sess ngrok.Session, name string) {
	t.Helper()
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "mover")))
	if err != nil {
		t.Fatalf("labeled tunnel of %s: %v", name, err)
	}
	serveTunnel(t, tun, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintf(rw, "%s agent", name) }))
}

// options are an agent's connect options through the relay at addr.
func (h *reconnectHolder) options(addr string) []ngrok.ConnectOption {
	return []ngrok.ConnectOption{ngrok.WithServer("agents.test:443"), ngrok.WithCA(h.pool), ngrok.WithDialer(relayDialer(addr))}
}

// relayDialer dials addr whatever it is asked for.
type relayDialer string

func (d relayDialer) Dial(network, _ string) (net.Conn, error) {
	return net.Dial(network, string(d))
}

func (d relayDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, string(d))
}
