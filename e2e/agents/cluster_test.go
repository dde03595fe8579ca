package agents

import (
	"bytes"
	"context"
	"crypto/x509"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/internal/testproc"
)

// Three replicas on PostgreSQL behind a real HAProxy, as deploy/replicas runs them: the replicas
// on 127.0.0.2, .3 and .4 with the same ports, each with its link (--peer-listen), and HAProxy
// on 127.0.0.1 balancing every listener round robin (TCP mode, retries and redispatch for
// connection failures), the TCP endpoints' port range included, its servers without a port so
// a connection keeps the port it came to. Its configuration is deploy/replicas/haproxy.cfg.tmpl
// rendered for these addresses.

// RequireHAProxyEnv makes a test that needs HAProxy fail where it is missing instead of
// skipping; .ci/run sets it after installing the package.
const RequireHAProxyEnv = "EDGEPLANE_REQUIRE_HAPROXY"

// haproxyTemplate is the configuration template deploy/replicas's compose file uses too.
const haproxyTemplate = "../../deploy/replicas/haproxy.cfg.tmpl"

// haproxyValues are what the template is rendered with.
type haproxyValues struct {
	Bind                                     string
	MaxConn                                  int
	API, Agent, HTTP, HTTPS, TCPLow, TCPHigh int
	Servers                                  []haproxyServer
	DockerDNS                                bool
}

type haproxyServer struct{ Name, Host string }

// renderHAProxy renders the template with v.
func renderHAProxy(t *testing.T, v haproxyValues) string {
	t.Helper()
	tmpl, err := template.ParseFiles(haproxyTemplate)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// composeHAProxy is what deploy/replicas/compose.yaml runs: its services' names and ports.
var composeHAProxy = haproxyValues{Bind: "*", MaxConn: 20000, API: 8080, Agent: 4443, HTTP: 8081, HTTPS: 8443,
	TCPLow: 10000, TCPHigh: 10099, DockerDNS: true,
	Servers: []haproxyServer{{"edgeplane-1", "edgeplane-1"}, {"edgeplane-2", "edgeplane-2"}, {"edgeplane-3", "edgeplane-3"}}}

// TestDeployExampleRendersTemplate: deploy/replicas/haproxy.cfg is the template rendered for the
// compose file's services, and the compose file publishes exactly the ports it balances; so the
// example and the tests' configuration come from one file. (Docker does not run here: the
// tests below, on the same template, are the example's proof.)
func TestDeployExampleRendersTemplate(t *testing.T) {
	want := renderHAProxy(t, composeHAProxy)
	got, err := os.ReadFile("../../deploy/replicas/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("deploy/replicas/haproxy.cfg is not haproxy.cfg.tmpl rendered for compose.yaml; render it again:\n%s", want)
	}
	compose, err := os.ReadFile("../../deploy/replicas/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v := composeHAProxy
	for _, p := range []string{fmt.Sprintf(`"%d:%d"`, v.API, v.API), fmt.Sprintf(`"%d:%d"`, v.Agent, v.Agent),
		fmt.Sprintf(`"%d:%d"`, v.HTTP, v.HTTP), fmt.Sprintf(`"%d:%d"`, v.HTTPS, v.HTTPS),
		fmt.Sprintf(`"%d-%d:%d-%d"`, v.TCPLow, v.TCPHigh, v.TCPLow, v.TCPHigh),
		fmt.Sprintf("EDGEPLANE_TCP_PORT_RANGE: %d-%d", v.TCPLow, v.TCPHigh)} {
		if !bytes.Contains(compose, []byte(p)) {
			t.Errorf("compose.yaml does not have %s", p)
		}
	}
	for _, s := range v.Servers {
		if !bytes.Contains(compose, []byte("  "+s.Name+":\n")) || !bytes.Contains(compose, []byte("EDGEPLANE_PEER_ADVERTISE: "+s.Host+":7443")) {
			t.Errorf("compose.yaml has no service %s advertising its link", s.Name)
		}
	}
}

// clusterPorts are the ports every replica and the balancer listen on.
type clusterPorts struct {
	api, agent, http, https, peer, tcpLow, tcpHigh int
}

// clusterIPs are the addresses of the balancer and the replicas.
var clusterIPs = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}

// freeClusterPorts finds ports free on every cluster address, below the ephemeral range (see
// pebbletest.FreePort): five for the listeners and tcpPorts for TCP endpoints, consecutive.
func freeClusterPorts(t *testing.T, tcpPorts int) clusterPorts {
	t.Helper()
	n := 5 + tcpPorts
	for range 100 {
		base := 20000 + rand.IntN(12000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			for _, ip := range clusterIPs {
				ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return clusterPorts{api: base, agent: base + 1, http: base + 2, https: base + 3, peer: base + 4,
				tcpLow: base + 5, tcpHigh: base + n - 1}
		}
	}
	t.Fatal("no run of free ports on the cluster's addresses after 100 tries")
	return clusterPorts{}
}

// cluster is three replicas and the balancer in front of them.
type cluster struct {
	t        *testing.T
	dsn      string
	env      []string
	ports    clusterPorts
	replicas []*clusterReplica
	// lb is the balancer as a world: every listener of it is HAProxy's, and the helpers of
	// world (credential, httpClient, gov2Agent, ...) work through it.
	lb      *world
	haproxy *exec.Cmd
}

// clusterReplica is one replica: the world of its own listeners, its address and replica id.
type clusterReplica struct {
	*world
	ip, id string
}

// needHAProxy returns haproxy's path, or skips the test where it is missing (fails it where
// RequireHAProxyEnv says it must be there).
func needHAProxy(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if os.Getenv(RequireHAProxyEnv) != "" {
			t.Fatalf("haproxy is not installed, and %s is set: apt-get install haproxy", RequireHAProxyEnv)
		}
		t.Skip("skipped: haproxy is not installed (Debian: apt-get install haproxy); the tests of replicas behind a load balancer need it")
	}
	return bin
}

// replicaRE finds a replica's id and listeners in its log.
var replicaRE = regexp.MustCompile(`msg="data plane listening" .*replica=(rep_\S+)`)

// startCluster starts three replicas on a new PostgreSQL schema and HAProxy in front of them.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := needHAProxy(t)
	dsn := testdb.Postgres(t) // skips without EDGEPLANE_TEST_POSTGRES
	c := &cluster{t: t, dsn: dsn, env: []string{testdb.SecretKeyEnvVar()}, ports: freeClusterPorts(t, 20)}
	var token string
	for i, ip := range clusterIPs[1:] {
		r := c.startReplica(ip)
		if i == 0 {
			tok, ok := testproc.BootstrapToken(t, r.proc.Stderr.String())
			if !ok {
				t.Fatalf("no bootstrap token; stderr:\n%s", r.proc.Stderr)
			}
			token = tok
		}
		r.token = token
		c.replicas = append(c.replicas, r)
	}
	caPEM := c.caPEM()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, r := range c.replicas {
		r.caPEM, r.ca = caPEM, pool
	}
	lb := clusterIPs[0]
	p := c.ports
	c.lb = &world{t: t, db: dsn, env: c.env, token: token, ca: pool, caPEM: caPEM,
		api: "http://" + net.JoinHostPort(lb, strconv.Itoa(p.api)), agent: net.JoinHostPort(lb, strconv.Itoa(p.agent)),
		http: net.JoinHostPort(lb, strconv.Itoa(p.http)), https: net.JoinHostPort(lb, strconv.Itoa(p.https))}
	v := haproxyValues{Bind: lb, MaxConn: 4000, API: p.api, Agent: p.agent, HTTP: p.http, HTTPS: p.https,
		TCPLow: p.tcpLow, TCPHigh: p.tcpHigh}
	for i, r := range c.replicas {
		v.Servers = append(v.Servers, haproxyServer{Name: fmt.Sprintf("edgeplane-%d", i+1), Host: r.ip})
	}
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(renderHAProxy(t, v)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	c.haproxy = exec.Command(bin, "-db", "-f", cfg)
	c.haproxy.Stdout, c.haproxy.Stderr = out, out
	if err := c.haproxy.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = c.haproxy.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = c.haproxy.Process.Kill()
		<-done
	})
	eventually(t, 5*time.Second, "haproxy serves the API", func() bool {
		select {
		case <-done:
			t.Fatalf("haproxy exited:\n%s", out.String())
		default:
		}
		resp, err := http.Get(c.lb.api + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return c
}

// startReplica starts a replica on ip with the cluster's ports.
func (c *cluster) startReplica(ip string) *clusterReplica {
	c.t.Helper()
	p := c.ports
	at := func(port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
	args := []string{"--db", c.dsn, "--listen", at(p.api), "--agent-listen", at(p.agent), "--http-listen", at(p.http),
		"--https-listen", at(p.https), "--tcp-listen-host", ip, "--peer-listen", at(p.peer),
		"--tcp-addr-host", clusterIPs[0], "--tcp-port-range", fmt.Sprintf("%d-%d", p.tcpLow, p.tcpHigh),
		"--agent-hostnames", "localhost," + strings.Join(clusterIPs, ","), "--log-level", "debug",
		// Behind the balancer every client comes from 127.0.0.1.
		"--max-connections-per-ip", "0", "--agent-max-connections-per-ip", "0",
		"--agent-max-unauthenticated-per-ip", "0", "--public-max-connections-per-ip", "0"}
	proc := testproc.Serve(c.t, binPath, "", c.env, args...)
	r := &clusterReplica{world: &world{t: c.t, proc: proc, db: c.dsn, env: c.env, api: "http://" + proc.Addr,
		agent: at(p.agent), http: at(p.http), https: at(p.https)}, ip: ip}
	deadline := time.Now().Add(testproc.StartTimeout)
	for {
		if m := replicaRE.FindStringSubmatch(proc.Stderr.String()); m != nil {
			r.id = m[1]
			return r
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no data plane listening line with a replica id; stderr:\n%s", proc.Stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// caPEM prints edgeplane's CA of the cluster's database.
func (c *cluster) caPEM() []byte {
	c.t.Helper()
	cmd := exec.Command(binPath, "ca", "--db", c.dsn)
	cmd.Env = testproc.CleanEnv(c.env...)
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("edgeplane ca: %v", err)
	}
	return out
}

// holder returns the replica whose agent holds the tunnel online on name (a hostname or a tcp
// address), from the store's rows; nil when none does.
func (c *cluster) holder(name string) *clusterReplica {
	c.t.Helper()
	db, err := sql.Open("pgx", c.dsn)
	if err != nil {
		c.t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var replica string
	err = db.QueryRowContext(ctx, `SELECT s.replica FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id
		WHERE t.name = $1 ORDER BY t.id DESC LIMIT 1`, strings.ToLower(name)).Scan(&replica)
	if err != nil {
		return nil
	}
	for _, r := range c.replicas {
		if r.id == replica {
			return r
		}
	}
	return nil
}

// others returns the replicas but r.
func (c *cluster) others(r *clusterReplica) []*clusterReplica {
	var out []*clusterReplica
	for _, o := range c.replicas {
		if o != r {
			out = append(out, o)
		}
	}
	return out
}

// waitServed waits until every replica answers a GET of url (through its own listeners) with
// want in the body: the endpoint's bind has reached every replica's directory.
func (c *cluster) waitServed(url, want string) {
	c.t.Helper()
	for _, r := range c.replicas {
		client := r.httpClient()
		if strings.HasPrefix(url, "https://") {
			client = r.httpsClient()
		}
		eventually(c.t, time.Second, "replica "+r.ip+" serves "+url, func() bool {
			resp, err := client.Get(url)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == 200 && strings.Contains(string(b), want)
		})
	}
}

// logsOnFailure prints each replica's log (its processes' one after another, as they share its
// stderr) when the test has failed, without the balancer's health checks: what a lost request
// met on its way (a bind that took long, a link down, a refused handshake) is only there.
func (c *cluster) logsOnFailure() {
	c.t.Cleanup(func() {
		if !c.t.Failed() {
			return
		}
		for _, r := range c.replicas {
			var kept []string
			for _, line := range strings.Split(r.proc.Stderr.String(), "\n") {
				if !strings.Contains(line, "route=\"GET /readyz\"") {
					kept = append(kept, line)
				}
			}
			c.t.Logf("replica %s's log (its end):\n%s", r.ip, lastBytes(strings.Join(kept, "\n"), 20000))
		}
	})
}
