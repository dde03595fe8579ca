package tunnel

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testnet"
)

// wrapped is an accepted connection as a listener's accounting wraps it (internal/netx).
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// TestRawIOReadWrite: bytes cross both ways in order, small writes by raw system calls and
// large ones by the ordinary path, and the peer's close reads as io.EOF.
func TestRawIOReadWrite(t *testing.T) {
	s, c := testnet.TCPPair(t)
	raw := rawIO(wrapped{s})
	if _, ok := raw.(*rawConn); !ok {
		t.Fatalf("rawIO gave %T, want *rawConn", raw)
	}
	if got := raw.(*rawConn).NetConn(); got != (wrapped{s}) {
		t.Errorf("NetConn is %v, want the wrapped connection", got)
	}
	want := append(bytes.Repeat([]byte("ping"), 10), bytes.Repeat([]byte{7}, 1<<20)...)
	go func() {
		_, _ = c.Write(want[:40])
		_, _ = c.Write(want[40:])
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, or they differ", len(got), len(want))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var back []byte
	go func() {
		defer wg.Done()
		back, _ = io.ReadAll(c)
	}()
	for i := 0; i < len(want); i += 3000 { // writes of 3,000 bytes: raw system calls
		if _, err := raw.Write(want[i:min(i+3000, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Write(want); err != nil { // 1 MiB at once: the ordinary path
		t.Fatal(err)
	}
	raw.Close()
	wg.Wait()
	if !bytes.Equal(back, append(want, want...)) {
		t.Fatalf("the peer read %d bytes, want %d, or they differ", len(back), 2*len(want))
	}
}

// TestRawIODeadlinesAndClose: deadlines hold on raw reads and on raw writes that wait for a full
// socket buffer, with the errors net.Conn gives; a read after Close reports net.ErrClosed.
func TestRawIODeadlinesAndClose(t *testing.T) {
	s, c := testnet.TCPPair(t)
	raw := rawIO(s)
	raw.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := raw.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	raw.SetReadDeadline(time.Time{})
	// The peer reads nothing: small writes fill the socket buffers, then wait until the deadline.
	raw.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	chunk := make([]byte, rawWriteMax)
	wrote := 0
	for wrote < 64<<20 {
		n, err := raw.Write(chunk)
		wrote += n
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write past its deadline: %v, want a timeout", err)
			}
			break
		}
	}
	if wrote >= 64<<20 {
		t.Fatal("64 MiB written to a peer reading nothing")
	}
	// What was written arrives whole.
	go raw.Close()
	n, _ := io.Copy(io.Discard, c)
	if n != int64(wrote) {
		t.Errorf("the peer read %d bytes, want the %d written", n, wrote)
	}
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
}

// TestRawIOOnlyTCP: a connection that is not TCP is returned as it is.
func TestRawIOOnlyTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := rawIO(a); got != a {
		t.Errorf("rawIO(pipe) = %T, want the pipe itself", got)
	}
}
