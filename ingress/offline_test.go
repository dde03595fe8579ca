package ingress

import (
	"context"
	"errors"
	"net"
	"testing"
)

// failingEndpoint is an endpoint whose every dial fails with err.
type failingEndpoint struct {
	tripEndpoint
	err error
}

func (e *failingEndpoint) Dial(context.Context, string, string, string, bool) (net.Conn, error) {
	return nil, e.err
}

// goneError is a dial's failure saying the endpoint went offline meanwhile.
type goneError struct{}

func (goneError) Error() string         { return "the agent left and did not come back" }
func (goneError) EndpointOffline() bool { return true }

// TestDialOfflineIsOffline: an endpoint whose dial fails because it went offline after its
// lookup (account A's: its agent left and did not come back) is answered 404 ERR_NGROK_3200, as
// an offline endpoint is, while a dial that fails otherwise (account B's) is still a failed
// tunnel, 502 ERR_NGROK_8012.
func TestDialOfflineIsOffline(t *testing.T) {
	a := &failingEndpoint{tripEndpoint: tripEndpoint{id: "ep_a", account: "acct_a"}, err: wrapErr(goneError{})}
	b := &failingEndpoint{tripEndpoint: tripEndpoint{id: "ep_b", account: "acct_b"}, err: errors.New("the replica could not be reached")}
	s, addr := servePublic(t, Config{Lookup: byHost(map[string]Endpoint{"a.example.com": a, "b.example.com": b})})
	w := &tripWorld{s: s, addr: addr}
	pc := w.dial(t)
	if st, code, body := pc.get(t, "a.example.com", "/"); st != 404 || code != "ERR_NGROK_3200" {
		t.Errorf("an endpoint gone offline before its dial: %d %s %q, want 404 ERR_NGROK_3200", st, code, body)
	}
	if st, code, body := pc.get(t, "b.example.com", "/"); st != 502 || code != "ERR_NGROK_8012" {
		t.Errorf("an endpoint whose dial failed: %d %s %q, want 502 ERR_NGROK_8012", st, code, body)
	}
}

// wrapErr wraps err as the tunnel package's errors do, so that it is found by errors.As.
func wrapErr(err error) error { return &wrapped{err} }

type wrapped struct{ error }

func (w *wrapped) Unwrap() error { return w.error }
