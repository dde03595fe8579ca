package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// tlsClient is the load generator's raw HTTP/1.1 client over TLS: it dials and completes the
// handshake itself, then lets client speak HTTP on the connection, with keep-alive.
type tlsClient struct {
	*client
	cfg *tls.Config
}

func (c *tlsClient) do(r *req) (int, []byte, error) {
	if c.conn == nil {
		raw, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return 0, nil, err
		}
		conn := tls.Client(raw, c.cfg)
		_ = conn.SetDeadline(time.Now().Add(ioTimeout))
		if err := conn.Handshake(); err != nil {
			raw.Close()
			return 0, nil, err
		}
		c.conn = conn
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 64<<10)
		} else {
			c.br.Reset(conn)
		}
	}
	return c.client.do(r)
}

// trafficPath is one way from the load generator to the upstream.
type trafficPath struct {
	name string
	addr string      // where the load generator connects
	host string      // Host header and TLS server name
	tls  *tls.Config // nil: plain HTTP
	// middle are the processes between the client and the upstream, whose CPU is the path's
	// cost: the reverse proxy, or edgeplane and the agent.
	middle []*child
	req    *req
}

func (p *trafficPath) newDoer() doer {
	if p.tls == nil {
		return newClient(p.addr)
	}
	return &tlsClient{client: newClient(p.addr), cfg: p.tls}
}

// round is one measurement of a path at one concurrency.
type round struct {
	n, errors int
	firstErr  string
	elapsed   time.Duration
	p50, p99  time.Duration
	cpu       []time.Duration // of each middle process, during the measured window
	sys       []procCounts    // of each middle process, during the measured window
}

func (r round) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// measureRound drives p with conc keep-alive connections (each its own worker sending the next
// request when the last is answered): a warm-up that is not recorded, then a measured window.
// Connections are opened afresh each round, so TLS handshakes happen in the warm-up.
func measureRound(ctx context.Context, p *trafficPath, conc int, warmup, window time.Duration) (round, error) {
	var out round
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(window)
	type result struct {
		lat      []time.Duration
		errors   int
		firstErr string
	}
	results := make([]result, conc)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := p.newDoer()
			defer cl.close()
			r := &results[w]
			r.lat = make([]time.Duration, 0, 1<<13)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				status, body, err := cl.do(p.req)
				lat := time.Since(t0)
				if err == nil && status != 200 {
					err = fmt.Errorf("status %d: %.200s", status, body)
				}
				if err != nil {
					if !t0.Before(measureFrom) {
						r.errors++
						if r.firstErr == "" {
							r.firstErr = err.Error()
						}
					}
					time.Sleep(10 * time.Millisecond) // a failing path is not spun on
					continue
				}
				if !t0.Before(measureFrom) {
					r.lat = append(r.lat, lat)
				}
			}
		}()
	}
	out.elapsed, out.cpu, out.sys = cpuWindow(ctx, p.middle, measureFrom, wg.Wait)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	var all []time.Duration
	for _, r := range results {
		all = append(all, r.lat...)
		out.errors += r.errors
		if out.firstErr == "" {
			out.firstErr = r.firstErr
		}
	}
	out.n = len(all)
	if len(all) > 0 {
		slices.Sort(all)
		out.p50, out.p99 = percentile(all, 0.50), percentile(all, 0.99)
	}
	return out, nil
}

// transfer is one bulk transfer through a path.
type transfer struct {
	bytes   int64
	elapsed time.Duration
	err     error
	// rss and peak are edgeplane's RSS before the transfer and its peak during it (zero for the
	// paths without edgeplane).
	rss, peak int64
	// cpu is the CPU time the path's middle processes spent during the transfer (the frp pairs
	// only): the steadiest figure of a transfer on a busy machine.
	cpu time.Duration
	// syscalls and switches are the middle processes' system calls and context switches during
	// the transfer (the frp pairs only; child.events).
	syscalls, switches int64
}

// cpuPerMB is the middle processes' CPU time per MB moved, in microseconds (0 when not known).
func (t transfer) cpuPerMB() float64 {
	if t.err != nil || t.bytes <= 0 {
		return 0
	}
	return float64(t.cpu.Microseconds()) / (float64(t.bytes) / 1e6)
}

// perMB is n per MB moved (0 when not known).
func (t transfer) perMB(n int64) float64 {
	if t.err != nil || t.bytes <= 0 {
		return 0
	}
	return float64(n) / (float64(t.bytes) / 1e6)
}

func (t transfer) mbps() float64 {
	if t.elapsed <= 0 || t.err != nil {
		return 0
	}
	return float64(t.bytes) / 1e6 / t.elapsed.Seconds()
}

// bulkTransfer downloads (GET /bulk?n=size) or uploads (POST /bulk) size bytes through p with
// net/http's client over HTTP/1.1, and checks the byte count.
func bulkTransfer(ctx context.Context, p *trafficPath, upload bool, size int64, ep *child) transfer {
	var t transfer
	if ep != nil {
		t.rss, _ = currentRSS(ep)
		_ = ep.resetPeak()
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, p.addr)
		},
		TLSClientConfig: p.tls, DisableCompression: true, ForceAttemptHTTP2: false,
		WriteBufferSize: 64 << 10, ReadBufferSize: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Minute}
	scheme := "http"
	if p.tls != nil {
		scheme = "https"
	}
	url := scheme + "://" + p.host + "/bulk"
	start := time.Now()
	var resp *http.Response
	if upload {
		req, err := http.NewRequestWithContext(ctx, "POST", url, io.LimitReader(zeros{}, size))
		if err != nil {
			t.err = err
			return t
		}
		req.ContentLength = size
		resp, t.err = hc.Do(req)
	} else {
		req, err := http.NewRequestWithContext(ctx, "GET", url+"?n="+strconv.FormatInt(size, 10), nil)
		if err != nil {
			t.err = err
			return t
		}
		resp, t.err = hc.Do(req)
	}
	if t.err != nil {
		return t
	}
	body := &countingReader{r: resp.Body}
	var got []byte
	if upload {
		got, t.err = io.ReadAll(io.LimitReader(body, 64))
	} else {
		_, t.err = io.Copy(io.Discard, body)
	}
	resp.Body.Close()
	t.elapsed = time.Since(start)
	switch {
	case t.err != nil:
	case resp.StatusCode != 200:
		t.err = fmt.Errorf("status %d", resp.StatusCode)
	case upload && string(got) != strconv.FormatInt(size, 10):
		t.err = fmt.Errorf("the upstream read %q bytes, want %d", got, size)
	case !upload && body.n != size:
		t.err = fmt.Errorf("downloaded %d bytes, want %d", body.n, size)
	}
	t.bytes = size
	if ep != nil {
		t.peak, _ = ep.peakRSS()
	}
	return t
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// currentRSS is VmRSS of a process in bytes.
func currentRSS(c *child) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid()))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", c.pid())
}

// cpuWindow measures the CPU, system calls and context switches of the middle processes from
// measureFrom until wait returns (the load's workers are done), and how long that window was:
// the CPU per request of a path.
func cpuWindow(ctx context.Context, middle []*child, measureFrom time.Time, wait func()) (time.Duration, []time.Duration, []procCounts) {
	cpu0 := make([]time.Duration, len(middle))
	sys0 := make([]procCounts, len(middle))
	select {
	case <-time.After(time.Until(measureFrom)):
		for i, c := range middle {
			cpu0[i], _ = c.cpu()
			sys0[i], _ = c.counts()
		}
	case <-ctx.Done():
	}
	wait()
	elapsed := time.Since(measureFrom)
	cpu := make([]time.Duration, 0, len(middle))
	sys := make([]procCounts, 0, len(middle))
	for i, c := range middle {
		cpu1, _ := c.cpu()
		sys1, _ := c.counts()
		cpu = append(cpu, cpu1-cpu0[i])
		sys = append(sys, sys1.sub(sys0[i]))
	}
	return elapsed, cpu, sys
}
