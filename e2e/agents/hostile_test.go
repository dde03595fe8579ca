package agents

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
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

	t.Run("a session that stops answering heartbeats is dropped", func(t *testing.T) {
		sess, c := w.rawSession(t)
		var resp struct{ Error, ClientId string }
		auth := map[string]any{"Version": []string{"3"}, "Extra": map[string]any{"Authtoken": token,
			"HeartbeatInterval": int64(time.Second), "HeartbeatTolerance": int64(time.Second)}}
		if err := rpc(sess, 0, auth, &resp); err != nil || resp.Error != "" || resp.ClientId == "" {
			t.Fatalf("auth: %v %+v", err, resp)
		}
		// This client never accepts the server's heartbeat stream, so no ping is answered.
		start := time.Now()
		if !closedWithin(c, 6*time.Second) {
			t.Fatalf("the session outlived its heartbeat tolerance")
		}
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Errorf("dropped after %v, before interval+tolerance (2s)", took)
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
