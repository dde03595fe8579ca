package tunnel

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"

	"github.com/edgeplane/edgeplane/internal/benchcpu"
)

// countingConn counts the writes on a TCP connection: one per TLS record, each a system call.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// BenchmarkSessionFramer compares muxado's framer with edgeplane's on the server side of a
// session over real TLS (the client, like ngrok-go, uses muxado's): writes/op is the number of
// write system calls the server made per operation, which does not depend on the machine's load.
//
//   - roundtrip: on one stream, the server writes 300 bytes and reads the client's 300-byte
//     answer (a small request and response on a kept-alive proxy stream);
//   - upload: the server writes 1 MiB in writes of 16 KiB (a request body carried to an agent).
func BenchmarkSessionFramer(b *testing.B) {
	framers := []struct {
		name string
		new  func(io.Reader, io.Writer) frame.Framer
	}{{"muxado", frame.NewFramer}, {"single-write", newSingleWriteFramer}}
	for _, fr := range framers {
		b.Run(fr.name+"/roundtrip", func(b *testing.B) {
			cnt, srv, cli := benchSession(b, fr.new)
			st, peer := benchStream(b, srv, cli)
			go func() {
				buf := make([]byte, 300)
				for {
					if _, err := io.ReadFull(peer, buf); err != nil {
						return
					}
					if _, err := peer.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, 300)
			cnt.writes.Store(0)
			b.ResetTimer()
			for b.Loop() {
				if _, err := st.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(st, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cnt.writes.Load())/float64(b.N), "writes/op")
		})
		b.Run(fr.name+"/upload-1MiB", func(b *testing.B) {
			cnt, srv, cli := benchSession(b, fr.new)
			st, peer := benchStream(b, srv, cli)
			go func() { _, _ = io.Copy(io.Discard, peer) }()
			chunk := make([]byte, 16<<10)
			b.SetBytes(1 << 20)
			cnt.writes.Store(0)
			b.ResetTimer()
			for b.Loop() {
				for range (1 << 20) / len(chunk) {
					if _, err := st.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(cnt.writes.Load())/float64(b.N), "writes/op")
		})
	}
}

// benchSession starts a session pair over TLS with newFramer on the server side and returns
// the counter of the server's TCP writes.
func benchSession(b *testing.B, newFramer func(io.Reader, io.Writer) frame.Framer) (*countingConn, muxado.Session, muxado.Session) {
	var cnt *countingConn
	sc, cc := tlsPair(b, func(c net.Conn) net.Conn { cnt = &countingConn{Conn: c}; return cnt })
	srv := muxado.Server(sc, &muxado.Config{NewFramer: newFramer})
	cli := muxado.Client(cc, &muxado.Config{})
	b.Cleanup(func() { srv.Close(); cli.Close() })
	return cnt, srv, cli
}

// benchStream opens a stream from the server and accepts it on the client.
func benchStream(b *testing.B, srv, cli muxado.Session) (muxado.Stream, muxado.Stream) {
	st, err := srv.OpenStream()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Write([]byte{0}); err != nil {
		b.Fatal(err)
	}
	peer, err := cli.AcceptStream()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(peer, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	return st, peer
}

// BenchmarkStreamWindow carries a download over one stream of a session pair over real TLS on
// loopback (the agent's side writes 1 MiB per operation in 32 KiB writes, edgeplane's side,
// with its framer, reads), with both sides configured for the same window; writes/MiB is the
// number of edgeplane's writes (its window credit) per MiB. muxado announces no
// window (each side assumes its own for its peer), so the agents' fixed 256 KiB is what a
// tunnel gets; the larger windows show what that costs a bulk transfer (docs/performance.md).
func BenchmarkStreamWindow(b *testing.B) {
	for _, w := range []uint32{256 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("window-%dKiB", w>>10), func(b *testing.B) { benchStreamWindow(b, w, 32<<10) })
	}
	for _, rd := range []int{64 << 10, 128 << 10} {
		b.Run(fmt.Sprintf("window-256KiB-read-%dKiB", rd>>10), func(b *testing.B) { benchStreamWindow(b, 256<<10, rd) })
	}
	// The agent at its 256 KiB, edgeplane granting it more as its reader keeps up (window.go).
	b.Run("autotuned", func(b *testing.B) { benchStreamWindow(b, 0, 32<<10) })
}

// benchStreamWindow is BenchmarkStreamWindow with window w, edgeplane's side reading into a
// buffer of rd bytes; w 0 is the agent at its default window and edgeplane auto-tuning.
func benchStreamWindow(b *testing.B, w uint32, rd int) {
	benchStreamWindowWrapped(b, w, rd, nil)
}

// benchStreamWindowWrapped is benchStreamWindow with edgeplane's end of the connection wrapped
// by link (nil: none), under the count of its writes.
func benchStreamWindowWrapped(b *testing.B, w uint32, rd int, link func(net.Conn) net.Conn) {
	var cnt *countingConn
	sc, cc := tlsPair(b, func(c net.Conn) net.Conn {
		if link != nil {
			c = link(c)
		}
		cnt = &countingConn{Conn: c}
		return cnt
	})
	newFramer, srvWindow := newSingleWriteFramer, w
	if w == 0 {
		g := newStreamGuard()
		g.wide, g.budget = true, NewWindowBudget(DefaultWindowBudget)
		g.growWindows(true)
		newFramer, srvWindow = g.framer, maxProxyWindow
		b.Cleanup(g.endWide)
	}
	srv := muxado.Server(sc, &muxado.Config{NewFramer: newFramer, MaxWindowSize: srvWindow})
	cli := muxado.Client(cc, &muxado.Config{MaxWindowSize: w})
	b.Cleanup(func() { srv.Close(); cli.Close() })
	// The agent opens no streams to edgeplane for traffic; edgeplane opens them and the
	// agent writes the response: open from srv, write from cli.
	st, peer := benchStream(b, srv, cli)
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(io.Discard, io.LimitReader(st, int64(b.N)<<20), make([]byte, rd))
		done <- err
	}()
	chunk := make([]byte, 32<<10)
	b.SetBytes(1 << 20)
	cnt.writes.Store(0)
	b.ResetTimer()
	benchcpu.PerOp(b)
	for range b.N {
		for range (1 << 20) / len(chunk) {
			if _, err := peer.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	// edgeplane's writes are its window credit: each a TLS record and a system call
	// here, and a record for the agent to read.
	b.ReportMetric(float64(cnt.writes.Load())/float64(b.N), "writes/MiB")
}
