//go:build !linux

package ingress

import "syscall"

// reusePort does nothing where SO_REUSEPORT's semantics differ from Linux's: a successor opens
// a TCP port once this process has closed it.
func reusePort(network, address string, c syscall.RawConn) error { return nil }
