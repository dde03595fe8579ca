package benchcpu

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testpki"
)

// BenchmarkHop measures what one hop of a bulk transfer costs this machine: bytes written into
// one loopback TCP connection and read out of it, plain and under TLS 1.3 (ECDSA P-256 and the
// cipher Go picks, as edgeplane's listeners use), sender and receiver in this process. It reports
// "cpu-s/GB", the CPU time of both ends per gigabyte carried. The bulk target is judged
// with it: the tunnel is two TLS hops and a plain one where the direct path is one plain hop, so
// on a machine of C cores the tunnel cannot carry more than C / (2·TLS + plain) GB/s, whatever the
// server does (docs/performance.md, "Bulk ≥ 60% of direct"). Run it with
//
//	go test -run XXX -bench Hop -benchtime 2s ./internal/benchcpu/
func BenchmarkHop(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		benchHop(b, func(c net.Conn) net.Conn { return c }, func(c net.Conn) net.Conn { return c })
	})
	b.Run("tls", func(b *testing.B) {
		certPEM, keyPEM := testpki.SelfSignedPEM(b, "hop.test", false)
		cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			b.Fatal(err)
		}
		srv := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
		cli := &tls.Config{InsecureSkipVerify: true, ServerName: "hop.test", MinVersion: tls.VersionTLS13} // #nosec: a loopback benchmark
		benchHop(b, func(c net.Conn) net.Conn { return tls.Client(c, cli) }, func(c net.Conn) net.Conn { return tls.Server(c, srv) })
	})
}

// hopChunk is what each write carries: net/http's and io.Copy's 32 KiB buffer.
const hopChunk = 32 << 10

// hopOp is the bytes of one benchmark operation.
const hopOp = 1 << 20

func benchHop(b *testing.B, client, server func(net.Conn) net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	read := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			read <- -1
			return
		}
		defer c.Close()
		n, _ := io.CopyBuffer(io.Discard, server(c), make([]byte, hopChunk))
		read <- n
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := client(raw)
	if hc, ok := c.(*tls.Conn); ok {
		if err := hc.Handshake(); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, hopChunk)
	b.SetBytes(hopOp)
	b.ResetTimer()
	start, wall := cpuTime(), time.Now()
	for range b.N {
		for sent := 0; sent < hopOp; sent += hopChunk {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
	n := <-read
	b.StopTimer()
	cpu, elapsed := cpuTime()-start, time.Since(wall)
	_ = c.Close()
	if n != int64(b.N)*hopOp {
		b.Fatalf("the reader got %d bytes of %d", n, int64(b.N)*hopOp)
	}
	gb := float64(n) / 1e9
	b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
	b.ReportMetric(cpu.Seconds()/elapsed.Seconds(), "cores")
}
