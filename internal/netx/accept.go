package netx

import (
	"errors"
	"net"
	"time"
)

// Serve accepts connections on ln and hands each to handle in a goroutine of its own, until
// Accept fails for good (the listener closed); that error is returned. Temporary failures
// (running out of file descriptors) are waited out with a backoff from 5 ms to 1 s, as net/http
// does, instead of ending the listener.
func Serve(ln net.Listener, handle func(net.Conn)) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go handle(c)
	}
}
