package ingress

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort sets SO_REUSEPORT on a TCP endpoint's or TCP edge's listener before it binds. A
// process taking over from this one (serve's handover) opens the same ports while this one
// still holds them, and Linux only lets a second socket bind a port when both set the option
// and belong to the same user: nothing else can share the port.
func reusePort(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
