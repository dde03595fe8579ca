package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Reading and writing agent connections without the runtime's system call bookkeeping. An idle
// session's only traffic is its agent's ping every 10 s, the echo, and the agent's window
// credit for it: two wake-ups and five system calls (a read and the read that finds nothing more,
// twice, and the echo's write). Through net.Conn each of them enters the scheduler's system call
// state, and while the process is otherwise idle the runtime's monitor thread sleeps and is woken
// by each one (runtime.entersyscallWakeSysmon), only to find nothing to do and sleep again. At
// 10,000 idle sessions that was a sixth of edgeplane's CPU profile at rest; with raw system calls
// CPU at rest went from 6.2% to 4.7% of a core (docs/decisions.md, docs/performance.md).
//
// The socket is non-blocking and its readiness still comes from the runtime's poller
// (syscall.RawConn), so a read or write that would block parks the goroutine as net.Conn does and
// deadlines hold; only the read(2) and write(2) themselves are made with syscall.RawSyscall,
// which never blocks on a non-blocking socket. Writes larger than rawWriteMax (bulk data) keep
// the ordinary path, so that a long copy into the kernel lets the scheduler hand the thread's
// processor to other goroutines.

// rawWriteMax is the largest write made with a raw system call: a TLS record of a ping, a
// window credit or a request head, not a bulk transfer's 16 KiB records in a batch.
const rawWriteMax = 4 << 10

// rawConn is an agent's TCP connection read and written with raw system calls. Its other methods
// (Close, deadlines, addresses) are the accepted connection's, which it wraps, so that the
// listener's accounting (internal/netx) sees it through NetConn.
type rawConn struct {
	net.Conn
	rc syscall.RawConn
}

// rawIO wraps c, when it is a TCP connection or wraps one, to be read and written with raw
// system calls; it returns c itself otherwise.
func rawIO(c net.Conn) net.Conn {
	for inner := c; inner != nil; {
		if sc, ok := inner.(*net.TCPConn); ok {
			rc, err := sc.SyscallConn()
			if err != nil {
				return c
			}
			return &rawConn{Conn: c, rc: rc}
		}
		w, ok := inner.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		inner = w.NetConn()
	}
	return c
}

// NetConn returns the connection rawConn wraps.
func (c *rawConn) NetConn() net.Conn { return c.Conn }

// Read reads what the socket holds, up to len(b), waiting for it in the runtime's poller.
func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, waiting in the runtime's poller while the socket's buffer is full.
func (c *rawConn) Write(b []byte) (int, error) {
	if len(b) > rawWriteMax {
		return c.Conn.Write(b)
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError reports err as net.Conn does: a *net.OpError naming the operation and the addresses,
// with the poller's deadline and closed-connection errors as they are (os.ErrDeadlineExceeded,
// net.ErrClosed), so callers' errors.Is checks hold.
func (c *rawConn) opError(op string, err error) error {
	if errors.Is(err, io.EOF) {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
