package server_test

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/server"
)

func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := server.LimitListener(raw, 2)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	request := func(c net.Conn) chan error {
		done := make(chan error, 1)
		go func() {
			if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				done <- err
				return
			}
			_, err := http.ReadResponse(bufio.NewReader(c), nil)
			done <- err
		}()
		return done
	}
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if err := <-request(c); err != nil { // served, and kept open (keep-alive)
			t.Fatal(err)
		}
	}
	third, err := net.Dial("tcp", raw.Addr().String()) // the kernel backlog accepts it
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	waiting := request(third)
	select {
	case err := <-waiting:
		t.Fatalf("a third connection was served beyond the cap of 2 (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	conns[0].Close()
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not served after another closed")
	}
	conns[1].Close()
}
