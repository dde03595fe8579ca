package peer

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
)

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countingConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// TestBatchConnGathersOneFrame: under a real TLS connection, a 48 KiB write made while the
// connection is armed (three TLS records) reaches the socket in one write at the flush, the
// bytes intact; a write while it is not armed (the handshake, crypto/tls's own records) goes
// out at once; and more than batchMax gathered is written as it overflows, in order. Without
// the gathering, the 48 KiB write is three writes of the socket.
func TestBatchConnGathersOneFrame(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ca := newTestCA(t)
	srvID, err := NewIdentity(ca.cert, ca.key, "rep_server")
	if err != nil {
		t.Fatal(err)
	}
	cliID, err := NewIdentity(ca.cert, ca.key, "rep_client")
	if err != nil {
		t.Fatal(err)
	}
	received := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- nil
			return
		}
		defer c.Close()
		tc := tls.Server(c, srvID.ServerConfig())
		got, _ := io.ReadAll(tc)
		received <- got
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: raw}
	bc := newBatchConn(cc)
	tc := tls.Client(bc, cliID.ClientConfig("rep_server"))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake through the batch connection (not armed): %v", err)
	}
	frame := bytes.Repeat([]byte("0123456789abcdef"), 3<<10) // 48 KiB: three records
	before := cc.count()
	bc.arm()
	if _, err := tc.Write(frame); err != nil {
		t.Fatal(err)
	}
	if n := cc.count() - before; n != 0 {
		t.Fatalf("%d writes before the flush, want 0", n)
	}
	if err := bc.flush(); err != nil {
		t.Fatal(err)
	}
	if n := cc.count() - before; n != 1 {
		t.Errorf("the 48 KiB frame took %d writes of the socket, want 1", n)
	}
	// More than batchMax while armed: written as it overflows, then the rest at the flush.
	big := bytes.Repeat([]byte("x"), 3*batchMax)
	before = cc.count()
	bc.arm()
	if _, err := tc.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := bc.flush(); err != nil {
		t.Fatal(err)
	}
	if n := cc.count() - before; n < 3 || n > 2*3*batchMax/(16<<10) {
		t.Errorf("%d writes for %d bytes gathered at most %d at a time", n, len(big), batchMax)
	}
	tc.Close()
	got := <-received
	if want := append(bytes.Clone(frame), big...); !bytes.Equal(got, want) {
		t.Errorf("the server read %d bytes, want the %d written, in order", len(got), len(want))
	}
}
