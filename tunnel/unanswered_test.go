package tunnel

import (
	"net"
	"testing"
	"time"
)

// TestStopWaitsForUnansweredStreams: a StopTunnel waits while a stream opened to the tunnel has
// had nothing from the agent, and goes ahead once the agent's first byte arrives or the stream
// is closed; a stream that is never answered holds it for the grace period only.
func TestStopWaitsForUnansweredStreams(t *testing.T) {
	var u unanswered
	ours, agents := net.Pipe()
	c := u.track(ours)
	done := make(chan struct{})
	go func() { u.wait(time.Minute); close(done) }()
	select {
	case <-done:
		t.Fatal("the stop went ahead while a stream was unanswered")
	case <-time.After(100 * time.Millisecond):
	}
	go func() { _, _ = agents.Write([]byte("H")) }()
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stop still waits after the agent answered")
	}
	if u.n.Load() != 0 {
		t.Fatalf("%d streams still counted", u.n.Load())
	}
	agents.Close()
	c.Read(make([]byte, 1)) // EOF: a later read does not count again
	c.Close()
	if u.n.Load() != 0 {
		t.Fatalf("a second read or close counted again: %d", u.n.Load())
	}

	// Closed unanswered: no longer waited for. Never answered: waited for the grace only.
	x, _ := net.Pipe()
	u.track(x).Close()
	if u.n.Load() != 0 {
		t.Fatalf("a closed stream is still counted: %d", u.n.Load())
	}
	y, _ := net.Pipe()
	u.track(y)
	start := time.Now()
	u.wait(50 * time.Millisecond)
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("the stop did not wait for the unanswered stream")
	}
}
