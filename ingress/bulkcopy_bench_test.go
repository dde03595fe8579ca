package ingress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.ngrok.com/muxado/v2"

	"github.com/edgeplane/edgeplane/internal/benchcpu"
)

// muxEndpoint is an endpoint whose streams are muxado streams to an "agent" in this process that
// copies each stream to the upstream as an agent does (ngrok-go copies with 32 KiB buffers), so
// a download's window credit crosses a real muxado session.
type muxEndpoint struct {
	tlsEndpoint
	sess muxado.Session
}

func (e *muxEndpoint) Dial(context.Context, string, string, string, bool) (net.Conn, error) {
	return e.sess.Open()
}

// BenchmarkBulkDownload measures 16 MiB downloads through the public HTTP listener from an
// upstream behind a muxado session over loopback TCP, the answer copied with the 32 KiB buffer
// (the large ones switched off) or a 256 KiB one (bulkcopy.go). It reports the process's CPU
// time (client, proxy, agent and upstream together, the same work in both) and its read and
// write system calls, per MB moved.
//
//	go test -run XXX -bench BulkDownload -benchtime 20x -count 3 ./ingress/
func BenchmarkBulkDownload(b *testing.B) {
	const size = 16 << 20
	upstream := serveUpstreamB(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = io.CopyN(w, zeroReader{}, size)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go agentLoop(ln, upstream)
	tc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	ep := &muxEndpoint{sess: muxado.Server(tc, nil)}
	defer ep.sess.Close()
	for _, c := range []struct {
		name string
		max  int
	}{{"copy-32KiB", 0}, {"copy-256KiB", maxBulkCopies}} {
		b.Run(c.name, func(b *testing.B) {
			s := New(Config{Lookup: func(string, string) Endpoint { return ep }})
			s.proxy.bulk.max = c.max
			dial := benchServe(b, s, (*Server).ServeHTTP)
			client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableCompression: true}}
			do := func() {
				resp, err := client.Get("http://dl.example.com/bulk")
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("download: %d bytes, %v", n, err)
				}
			}
			do()
			b.SetBytes(size)
			b.ResetTimer()
			benchcpu.PerOp(b)
			calls := syscallCount()
			for range b.N {
				do()
			}
			mb := float64(b.N) * size / 1e6
			b.ReportMetric(float64(syscallCount()-calls)/mb, "syscalls/MB")
		})
	}
}

// agentLoop serves the muxado session of the listener's first connection: each stream the
// proxy opens is copied to and from a new connection to the upstream.
func agentLoop(ln net.Listener, upstream string) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	sess := muxado.Client(c, nil)
	defer sess.Close()
	for {
		st, err := sess.Accept()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, st) }()
			_, _ = io.Copy(st, up)
		}()
	}
}

// zeroReader is an endless reader of zero bytes.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// syscallCount is the process's read and write system calls so far (/proc/self/io), 0 where
// that is not available.
func syscallCount() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, "syscr: %d", &v); err == nil {
			n += v
		} else if _, err := fmt.Sscanf(line, "syscw: %d", &v); err == nil {
			n += v
		}
	}
	return n
}
