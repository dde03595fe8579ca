package main

// A replica that dies in the middle of a certificate job: `serve` is killed with SIGKILL while
// Pebble is validating its challenge, another `serve` starts on the same database, and the job is
// taken over once the dead replica's lease has ended, resuming the same order: one order, one
// certificate. On every engine of the run (SQLite, and PostgreSQL when EDGEPLANE_TEST_POSTGRES
// is set), with the lease shortened to a few seconds through EDGEPLANE_TEST_ACME_LEASE (a test
// setting of package certmgr, see docs/testing.md).

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// crashLease is the certificate jobs' lease in the servers of this test.
const crashLease = "4s"

func TestACMECrashTakeover(t *testing.T) {
	forEngines(t, func(t *testing.T, engine string) {
		httpPort, tlsPort := freePort(t), freePort(t)
		// Pebble validates HTTP-01 through a gate that holds its connections until the test
		// opens it: the job is then certainly in the middle of its order when serve is killed.
		g := startGate(t, httpPort)
		pb := startPebble(t, pebbleOptions{httpPort: g.port, tlsPort: tlsPort})
		dsn := testdb.Fresh(t, engine)
		env := []string{"EDGEPLANE_TEST_ACME_LEASE=" + crashLease}
		if engine == "postgres" {
			env = append(env, testdb.SecretKeyEnvVar())
		}
		args := []string{"--db", dsn, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
			"--http-listen", "127.0.0.1:" + strconv.Itoa(httpPort), "--https-listen", "127.0.0.1:" + strconv.Itoa(tlsPort),
			"--acme-directory", pb.directory, "--acme-ca-roots", pb.roots}
		first := &acmeServer{proc: startServe(t, "", env, args...), httpPort: httpPort, tlsPort: tlsPort, db: dsn}
		tok, ok := bootstrapToken(t, first.Stderr.String())
		if !ok {
			t.Fatalf("no bootstrap token; stderr:\n%s", first.Stderr)
		}
		first.token = tok
		host := "crash-" + engine + ".example.com"
		id := first.reserve(t, host, "rsa")

		st, err := store.Open(context.Background(), dsn) // to read the lease, as another replica would
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })

		// Pebble connects to validate the answer: the order is placed and the challenge accepted.
		select {
		case <-g.arrived:
		case <-time.After(60 * time.Second):
			t.Fatalf("Pebble never came to validate; stderr:\n%s", first.Stderr)
		}
		if n := strings.Count(first.Stderr.String(), "order placed"); n != 1 {
			t.Fatalf("%d orders placed before the kill, want 1; stderr:\n%s", n, first.Stderr)
		}
		if err := first.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-first.Done
		dead := crashLeaseOf(t, st, id)
		if dead.Holder == "" {
			t.Fatalf("the killed server's lease was released: %+v", dead)
		}

		second := &acmeServer{proc: startServe(t, "", env, args...), token: tok, httpPort: httpPort, tlsPort: tlsPort, db: dsn}
		g.open() // Pebble's validation now reaches the second server, which answers from the store
		// Until the dead replica's lease ends, the job is left alone: every look that ends before
		// then finds the lease still the dead replica's.
		for {
			l := crashLeaseOf(t, st, id)
			if !time.Now().Before(dead.Until) {
				break
			}
			if l.Holder != dead.Holder {
				t.Fatalf("the job was taken over at %v, before the lease ended at %v: %+v", time.Now(), dead.Until, l)
			}
			time.Sleep(200 * time.Millisecond)
		}
		second.issuedWith(t, id, host, "rsa")
		if n := strings.Count(first.Stderr.String()+second.Stderr.String(), "order placed"); n != 1 {
			t.Fatalf("%d orders placed in all, want 1; second server's stderr:\n%s", n, second.Stderr)
		}
		if !strings.Contains(second.Stderr.String(), "resuming the order in progress") {
			t.Fatalf("the second server did not resume the order; stderr:\n%s", second.Stderr)
		}
		certs := second.api(t, "GET", "/tls_certificates", "", 200)["tls_certificates"].([]any)
		if len(certs) != 1 {
			t.Fatalf("%d TLS certificates, want the one issued: %v", len(certs), certs)
		}
	})
}

// crashLeaseOf returns the lease of the domain's job; the job must have a row.
func crashLeaseOf(t *testing.T, st *store.Store, id string) store.ACMELease {
	t.Helper()
	leases, err := st.ACMELeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.DomainID == id {
			return l
		}
	}
	t.Fatalf("no job row for domain %s", id)
	return store.ACMELease{}
}

// gate is a TCP proxy to a port of 127.0.0.1 that holds every connection until it is opened.
type gate struct {
	port    int
	arrived chan struct{} // closed when the first connection comes
	opened  chan struct{}
	once    sync.Once
}

// startGate starts a closed gate to target, stopped when the test ends.
func startGate(t *testing.T, target int) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{port: ln.Addr().(*net.TCPAddr).Port, arrived: make(chan struct{}), opened: make(chan struct{})}
	var arrive sync.Once
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			arrive.Do(func() { close(g.arrived) })
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				select {
				case <-g.opened:
				case <-done:
					return
				}
				// The target (a server just started) may take a moment to listen.
				var up net.Conn
				for deadline := time.Now().Add(10 * time.Second); ; {
					if up, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(target), time.Second); err == nil || time.Now().After(deadline) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return g
}

// open lets the held connections, and every later one, through.
func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }
