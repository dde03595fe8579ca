package main

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TestSlowClientsAreCutOff opens raw TCP connections to a running server that never finish their
// request header: one sends nothing, one half a request line, one trickles header lines forever
// (each byte arriving in time, the header never complete). The server closes every one of them
// within readHeaderTimeout (plus a margin), and meanwhile answers other clients at once.
//
// It takes readHeaderTimeout (10 s) of wall time, spent in parallel with the other tests. The
// read, write and idle timeouts (60 s, 60 s, 120 s) are too long to wait for in a test.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	p, token := serverToken(t)
	const margin = 4 * time.Second
	start := time.Now()
	type slow struct {
		name    string
		first   string // sent at once
		trickle string // then sent every 500 ms until the connection breaks
	}
	clients := []slow{
		{name: "silent"},
		{name: "half a request line", first: "GET /ip_policies HT"},
		{name: "trickling headers", first: "GET /ip_policies HTTP/1.1\r\nHost: x\r\nNgrok-Version: 2\r\n", trickle: "X-Slow: 1\r\n"},
	}
	var wg sync.WaitGroup
	closed := make([]time.Duration, len(clients))
	for i, c := range clients {
		conn, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if c.first != "" {
			if _, err := io.WriteString(conn, c.first); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(2)
		done := make(chan struct{})
		go func() { // read until the server closes the connection
			defer wg.Done()
			defer close(done)
			_ = conn.SetReadDeadline(start.Add(readHeaderTimeout + margin))
			_, _ = io.Copy(io.Discard, conn)
			closed[i] = time.Since(start)
		}()
		go func() {
			defer wg.Done()
			if c.trickle == "" {
				return
			}
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, c.trickle); err != nil {
						return
					}
				}
			}
		}()
	}
	// Other clients are served at once while the slow ones hang on.
	for range 3 {
		t0 := time.Now()
		if status, body := call(t, "GET", p.url("/ip_policies"), token, ""); status != 200 {
			t.Fatalf("GET /ip_policies beside slow clients: %d %s", status, body)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("a request beside slow clients took %v", d)
		}
		time.Sleep(2 * time.Second)
	}
	wg.Wait()
	for i, c := range clients {
		if closed[i] >= readHeaderTimeout+margin {
			t.Errorf("%s: the server kept the connection open for %v, beyond the %v header timeout", c.name, closed[i].Round(time.Millisecond), readHeaderTimeout)
		} else {
			t.Logf("%s: closed by the server after %v", c.name, closed[i].Round(time.Millisecond))
		}
	}
}
