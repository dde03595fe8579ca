package agents

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2"
)

// The agent listener faces the internet: these tests speak to it as a hostile or broken peer
// would, with a raw muxado session instead of an SDK, and check that it bounds what such a peer
// can make it do.

// rawSession opens a TLS + muxado session to the agent listener without authenticating.
func (w *world) rawSession(t *testing.T) (muxado.TypedStreamSession, *tls.Conn) {
	t.Helper()
	c, err := tls.Dial("tcp", w.agent, &tls.Config{RootCAs: w.ca, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("dial agent listener: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return muxado.NewTypedStreamSession(muxado.Client(c, &muxado.Config{})), c
}

// rpc sends one request on a new stream of the type and decodes the reply.
func rpc(sess muxado.TypedStreamSession, typ muxado.StreamType, req any, resp any) error {
	st, err := sess.OpenTypedStream(typ)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := json.NewEncoder(st).Encode(req); err != nil {
		return err
	}
	_ = st.SetReadDeadline(time.Now().Add(5 * time.Second))
	return json.NewDecoder(st).Decode(resp)
}

// closedWithin reports whether the server closes the connection within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errorsAs(err, &ne) && ne.Timeout())
}

func TestHostileAgents(t *testing.T) {
	w := start(t)
	_, token := w.credential()

	t.Run("a stream other than Auth first ends the session", func(t *testing.T) {
		sess, c := w.rawSession(t)
		var resp map[string]any
		_ = rpc(sess, 1, map[string]any{"Proto": "http"}, &resp) // Bind before Auth
		if !closedWithin(c, 3*time.Second) {
			t.Errorf("the session stayed open")
		}
	})

	t.Run("an oversized Auth is refused", func(t *testing.T) {
		sess, c := w.rawSession(t)
		st, err := sess.OpenTypedStream(0)
		if err != nil {
			t.Fatal(err)
		}
		big := `{"Version":["3"],"Extra":{"Metadata":"` + strings.Repeat("x", 1<<20) + `"}}`
		go func() { _, _ = st.Write([]byte(big)) }()
		_ = st.SetReadDeadline(time.Now().Add(5 * time.Second))
		var resp struct{ Error string }
		_ = json.NewDecoder(st).Decode(&resp)
		if !strings.Contains(resp.Error, "ERR_NGROK_109") {
			t.Errorf("oversized Auth answered %q, want ERR_NGROK_109", resp.Error)
		}
		if !closedWithin(c, 3*time.Second) {
			t.Errorf("the session stayed open after a refused Auth")
		}
	})

	t.Run("a session whose agent never pings is dropped", func(t *testing.T) {
		sess, c := w.rawSession(t)
		var resp struct{ Error, ClientId string }
		auth := map[string]any{"Version": []string{"3"}, "Extra": map[string]any{"Authtoken": token,
			"HeartbeatInterval": int64(time.Second), "HeartbeatTolerance": int64(time.Second)}}
		if err := rpc(sess, 0, auth, &resp); err != nil || resp.Error != "" || resp.ClientId == "" {
			t.Fatalf("auth: %v %+v", err, resp)
		}
		// This client never opens a heartbeat stream, so edgeplane hears no ping.
		start := time.Now()
		if !closedWithin(c, 20*time.Second) {
			t.Fatalf("the session outlived its heartbeat window")
		}
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Errorf("dropped after %v, before interval+tolerance (2s)", took)
		}
	})

	t.Run("pings are echoed and keep the session; one heartbeat stream per session", func(t *testing.T) {
		sess, c := w.rawSession(t)
		// Like every agent, open the heartbeat stream before Auth.
		hb, err := sess.OpenTypedStream(0xFFFFFFFF)
		if err != nil {
			t.Fatal(err)
		}
		var resp struct{ Error, ClientId string }
		auth := map[string]any{"Version": []string{"3"}, "Extra": map[string]any{"Authtoken": token,
			"HeartbeatInterval": int64(time.Second), "HeartbeatTolerance": int64(time.Second)}}
		if err := rpc(sess, 0, auth, &resp); err != nil || resp.Error != "" || resp.ClientId == "" {
			t.Fatalf("auth: %v %+v", err, resp)
		}
		// Ping every half second, as an agent with a 1 s interval would, in the background; every
		// ping must come back unchanged.
		stop, pinged := make(chan struct{}), make(chan error, 1)
		go func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					pinged <- nil
					return
				case <-tick.C:
				}
				ping := []byte{0xde, 0xad, byte(i), 0x01}
				echo := make([]byte, 4)
				_ = hb.SetReadDeadline(time.Now().Add(20 * time.Second))
				if _, err := hb.Write(ping); err != nil {
					pinged <- fmt.Errorf("ping %d: %v", i, err)
					return
				}
				if _, err := io.ReadFull(hb, echo); err != nil || !bytes.Equal(echo, ping) {
					pinged <- fmt.Errorf("ping %d: echo %x, %v; want %x", i, echo, err, ping)
					return
				}
			}
		}()
		time.Sleep(6 * time.Second) // three heartbeat windows
		// A second heartbeat stream is closed unanswered: one echo goroutine per session.
		hb2, err := sess.OpenTypedStream(0xFFFFFFFF)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = hb2.Write([]byte{1, 2, 3, 4})
		_ = hb2.SetReadDeadline(time.Now().Add(20 * time.Second))
		if n, err := io.ReadFull(hb2, make([]byte, 4)); err == nil {
			t.Errorf("a second heartbeat stream was echoed (%d bytes)", n)
		}
		var info struct{ Region *string }
		if err := rpc(sess, 8, map[string]any{}, &info); err != nil || info.Region == nil {
			t.Errorf("the session did not survive three heartbeat windows of pings: %v %+v", err, info)
		}
		close(stop)
		if err := <-pinged; err != nil {
			t.Fatal(err)
		}
		// Once the pings stop, the session ends.
		if !closedWithin(c, 20*time.Second) {
			t.Errorf("the session outlived its heartbeat window after the pings stopped")
		}
	})

	t.Run("a connection that never authenticates is closed, garbage or silence", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for the 10 s authentication deadline")
		}
		// Silence, and bytes that are not muxado frames (a frame of an unknown type is skipped
		// as it streams by, never buffered): both end at the authentication deadline.
		_, quiet := w.rawSession(t)
		noisy, err := tls.Dial("tcp", w.agent, &tls.Config{RootCAs: w.ca, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer noisy.Close()
		go func() {
			for range 64 {
				if _, err := noisy.Write(bytes.Repeat([]byte{0xff}, 4096)); err != nil {
					return
				}
			}
		}()
		for name, c := range map[string]net.Conn{"silent": quiet, "garbage": noisy} {
			if !closedWithin(c, 13*time.Second) {
				t.Errorf("an unauthenticated %s connection stayed open past the deadline", name)
			}
		}
	})
}
