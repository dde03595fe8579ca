package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// frp as a reference of the traffic benchmark: frps with an HTTP vhost listener and frpc with
// one http proxy to the same upstream, the open tunnel server most often run for what
// edgeplane's http endpoint does. Its binaries are not part of the repository and are not
// built by it: the path runs when -frp names a directory holding frps and frpc (release
// 0.70.1, docs/performance.md), and is skipped with a note otherwise.

const (
	pathFrp = "frp 0.70.1 HTTP vhost → frpc"
	frpHost = "frp.bench.test"
	// frpBulkSize and frpBulkPairs are the download compared with frp's: 256 MiB through the
	// http endpoint and through frp, in back-to-back pairs alternating which goes first (-frp-pairs
	// sets the number of pairs; more give a steadier median on a busy machine).
	frpBulkSize  = 256 << 20
	frpBulkPairs = 3
)

// frpWorld is a running frps and frpc.
type frpWorld struct {
	frps, frpc *child
	vhost      string // frps's HTTP vhost listener
}

func (w *frpWorld) stop() {
	if w.frpc != nil {
		w.frpc.stop()
	}
	if w.frps != nil {
		w.frps.stop()
	}
}

// startFrp starts frps and frpc from dir, every listener on 127.0.0.1, frpc's http proxy for
// frpHost forwarding to upstream (host:port). frpc's link to frps uses its defaults as
// released: TLS on, streams multiplexed over one connection. A missing binary is reported as
// errFrpMissing.
func (b *trafficRunner) startFrp(ctx context.Context, dir, upstream string) (*frpWorld, error) {
	frps, frpc := filepath.Join(dir, "frps"), filepath.Join(dir, "frpc")
	for _, bin := range []string{frps, frpc} {
		if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%w: no executable %s", errFrpMissing, bin)
		}
	}
	upHost, upPort, err := net.SplitHostPort(upstream)
	if err != nil {
		return nil, err
	}
	bind, err := freeAddr()
	if err != nil {
		return nil, err
	}
	vhost, err := freeAddr()
	if err != nil {
		return nil, err
	}
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	w := &frpWorld{vhost: vhost}
	// /healthz of each program's web server tells startChild it is up.
	w.frps, err = startChildFunc("frps", frps, func(addr string) ([]string, error) {
		conf := fmt.Sprintf(`bindAddr = "127.0.0.1"
bindPort = %s
proxyBindAddr = "127.0.0.1"
vhostHTTPPort = %s
webServer.addr = "127.0.0.1"
webServer.port = %s
log.level = "warn"
`, port(bind), port(vhost), port(addr))
		return frpConfig(b.work, "frps.toml", conf)
	}, nil, filepath.Join(b.work, "frps.log"))
	if err != nil {
		return nil, err
	}
	w.frpc, err = startChildFunc("frpc", frpc, func(addr string) ([]string, error) {
		conf := fmt.Sprintf(`serverAddr = "127.0.0.1"
serverPort = %s
loginFailExit = true
webServer.addr = "127.0.0.1"
webServer.port = %s
log.level = "warn"

[[proxies]]
name = "bench"
type = "http"
localIP = %q
localPort = %s
customDomains = [%q]
`, port(bind), port(addr), upHost, upPort, frpHost)
		return frpConfig(b.work, "frpc.toml", conf)
	}, nil, filepath.Join(b.work, "frpc.log"))
	if err != nil {
		w.stop()
		return nil, err
	}
	return w, ctx.Err()
}

var errFrpMissing = errors.New("frp is not built")

// frpConfig writes a configuration file into dir and returns the arguments naming it.
func frpConfig(dir, name, conf string) ([]string, error) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{"-c", path}, nil
}

// frpBulk downloads frpBulkSize through the http endpoint and through frp in cfg.frpPairs
// back-to-back pairs, alternating which goes first, and keeps each pair's two rates.
func (b *trafficRunner) frpBulk(ctx context.Context) {
	var ours, frp *trafficPath
	for _, p := range b.paths {
		switch p.name {
		case pathHTTPEndpoint:
			ours = p
		case pathFrp:
			frp = p
		}
	}
	if ours == nil || frp == nil {
		return
	}
	for i := range b.cfg.frpPairs {
		order := []*trafficPath{ours, frp}
		if i%2 == 1 {
			order = []*trafficPath{frp, ours}
		}
		var pair [2]transfer
		for _, p := range order {
			if ctx.Err() != nil {
				return
			}
			before, sys0, sw0 := cpuOf(p.middle), int64(0), int64(0)
			for _, c := range p.middle {
				pc, _ := c.counts()
				sys0, sw0 = sys0+pc.reads+pc.writes, sw0+pc.switches
			}
			t := bulkTransfer(ctx, p, false, frpBulkSize, nil)
			for j, c := range cpuOf(p.middle) {
				t.cpu += c - before[j]
			}
			for _, c := range p.middle {
				pc, _ := c.counts()
				t.syscalls, t.switches = t.syscalls+pc.reads+pc.writes, t.switches+pc.switches
			}
			t.syscalls, t.switches = t.syscalls-sys0, t.switches-sw0
			logf("frp pair %d: download %-34s %s: %.0f MB/s, CPU %.0f µs/MB, %.0f syscalls/MB, %.0f switches/MB %v", i+1, p.name, fmtSize(frpBulkSize),
				t.mbps(), t.cpuPerMB(), t.perMB(t.syscalls), t.perMB(t.switches), t.err)
			if p == ours {
				pair[0] = t
			} else {
				pair[1] = t
			}
		}
		b.frpPairs = append(b.frpPairs, pair)
	}
}

// frpTargets are the rates against frp: the http endpoint at least 3× frp's HTTP vhost at each
// concurrency (paired rounds), and its 256 MiB download at least 1.5× frp's (paired transfers).
func (b *trafficRunner) frpTargets() []trafficTarget {
	if b.frpSkipped != "" {
		return []trafficTarget{{name: "http endpoint against frp", ref: pathFrp, measured: "not measured: " + b.frpSkipped, na: true}}
	}
	var out []trafficTarget
	for _, c := range b.cfg.conc {
		name := fmt.Sprintf("http endpoint at c=%d ≥ 3× frp's rate", c)
		st, ref := b.stats(&trafficPath{name: pathHTTPEndpoint, middle: make([]*child, 2)}, c), b.stats(&trafficPath{name: pathFrp, middle: make([]*child, 2)}, c)
		v := b.pairedRatio(pathHTTPEndpoint, pathFrp, c)
		if st.n == 0 || ref.n == 0 {
			out = append(out, trafficTarget{name: name, ref: pathFrp, measured: "not measured", na: true})
			continue
		}
		out = append(out, trafficTarget{name: name, ref: pathFrp, met: v >= 3 && st.errors == 0,
			measured: fmt.Sprintf("%.2f× (%.0f vs %.0f req/s, median of paired rounds)", v, st.rps, ref.rps)})
	}
	name := "256 MiB download through the http endpoint ≥ 1.5× frp's"
	var ratio, ours, theirs []float64
	for _, p := range b.frpPairs {
		if p[0].err == nil && p[1].err == nil && p[1].mbps() > 0 {
			ratio, ours, theirs = append(ratio, p[0].mbps()/p[1].mbps()), append(ours, p[0].mbps()), append(theirs, p[1].mbps())
		}
	}
	if len(ratio) == 0 {
		return append(out, trafficTarget{name: name, ref: pathFrp, measured: "not measured", na: true})
	}
	return append(out, trafficTarget{name: name, ref: pathFrp, met: median(ratio) >= 1.5,
		measured: fmt.Sprintf("%.2f× (%.0f vs %.0f MB/s, medians of %d paired downloads)", median(ratio), median(ours), median(theirs), len(ratio))})
}

// httpEndpointTargets are the http endpoint's rates against the plain one-hop ReverseProxy:
// at least 0.90 of it at c=16, at least 1.0 at c=64 with a p99 no higher.
func (b *trafficRunner) httpEndpointTargets() []trafficTarget {
	var out []trafficTarget
	p := &trafficPath{name: pathHTTPEndpoint, middle: make([]*child, 2)}
	for _, c := range b.cfg.conc {
		st := b.stats(p, c)
		if st.n == 0 {
			continue
		}
		switch c {
		case 16:
			v := st.rateVs[pathProxy]
			out = append(out, trafficTarget{name: "http endpoint at c=16 ≥ 0.90 of the one-hop rate", ref: pathProxy, met: v >= 0.9 && st.errors == 0,
				measured: fmt.Sprintf("%.2f (%.0f req/s, median of paired rounds)", v, st.rps)})
		case 64:
			v, l := st.rateVs[pathProxy], st.p99Vs[pathProxy]
			out = append(out, trafficTarget{name: "http endpoint at c=64 ≥ 1.0 of the one-hop rate, p99 ≤ its p99", ref: pathProxy,
				met: v >= 1 && l <= 1 && st.errors == 0, measured: fmt.Sprintf("%.2f, p99 %.2f× (%.0f req/s, %s)", v, l, st.rps, secs(st.p99))})
		}
	}
	return out
}

// frpNote says what the frp rows are, or why they are missing.
func (b *trafficRunner) frpNote() string {
	if b.frpSkipped != "" {
		return "frp's rows are skipped: " + b.frpSkipped + ". They run when -frp names a directory holding frps and frpc of release 0.70.1 (docs/performance.md)."
	}
	return strings.Join([]string{
		fmt.Sprintf("`%s` is frps (HTTP vhost listener) and frpc (one http proxy to the same upstream) of frp 0.70.1 from %s,", pathFrp, b.cfg.frp),
		"every listener on 127.0.0.1, frpc's link to frps with its released defaults (TLS, streams multiplexed over one connection);",
		"its 256 MiB download is compared with the http endpoint's in " + fmt.Sprint(b.cfg.frpPairs) + " back-to-back pairs alternating which goes first.",
	}, " ")
}
