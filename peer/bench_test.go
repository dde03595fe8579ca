package peer

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"testing"
)

// BenchmarkLinkStream measures one forwarded stream's upload throughput: A's stream to B, B's
// copy to the agent (a TCP connection on loopback), against a plain TLS connection to the same
// kind of sink in the same run. The link's variants differ in their stream window, which is
// what this benchmark is for: the ratio link/tls at each window.
func BenchmarkLinkStream(b *testing.B) {
	ca := newTestCA(b)
	b.Run("tls", func(b *testing.B) {
		cert, err := ca.ca.Issue("127.0.0.1")
		if err != nil {
			b.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13})
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					if _, err := io.Copy(io.Discard, c); err == nil {
						_, _ = c.Write([]byte("k"))
					}
				}()
			}
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.ca.Pool(), MinVersion: tls.VersionTLS13})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		upload(b, c)
	})
	for _, window := range []uint32{Window, 1 << 20} {
		b.Run(fmt.Sprintf("link-window-%dKiB", window>>10), func(b *testing.B) {
			a := newNode(b, ca, "rep_a", nodeOpts{window: window})
			h := newNode(b, ca, "rep_b", nodeOpts{window: window})
			upload(b, a.dial(b, h, "tn_sink"))
		})
	}
}

// upload writes b.N MiB to c in 32 KiB writes (io.Copy's size), half-closes, and waits for the
// sink's answer that it read them all.
func upload(b *testing.B, c net.Conn) {
	chunk := make([]byte, 32<<10)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for range b.N {
		for range 32 {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	if ack, err := io.ReadAll(c); err != nil || string(ack) != "k" {
		b.Fatalf("the sink's answer: %q, %v", ack, err)
	}
}
