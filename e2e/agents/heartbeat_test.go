package agents

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.ngrok.com/ngrok"
	"golang.ngrok.com/ngrok/config"
)

// TestAgentHeartbeats: an ngrok-go agent pinging every 200 ms has its pings answered (edgeplane
// answers them in its framer's read path, tunnel/beat.go) and keeps one session over some thirty
// of them, serving requests throughout; once it stops pinging with a short tolerance, the
// session would end, which TestHostileAgents covers with a raw client.
func TestAgentHeartbeats(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	var beats, connects, disconnects atomic.Int64
	sess := w.mustConnect(token,
		ngrok.WithHeartbeatInterval(200*time.Millisecond), ngrok.WithHeartbeatTolerance(time.Second),
		ngrok.WithHeartbeatHandler(func(context.Context, ngrok.Session, time.Duration) { beats.Add(1) }),
		ngrok.WithConnectHandler(func(context.Context, ngrok.Session) { connects.Add(1) }),
		ngrok.WithDisconnectHandler(func(context.Context, ngrok.Session, error) { disconnects.Add(1) }))
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("beats.edgeplane.app"), config.WithScheme(config.SchemeHTTP)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveTunnel(t, tun, http.HandlerFunc(hello))
	eventually(t, 20*time.Second, "thirty heartbeats answered", func() bool {
		if st, _, _ := get(t, w.httpClient(), "http://beats.edgeplane.app/"); st != 200 {
			t.Errorf("a request during the heartbeats answered %d", st)
		}
		return beats.Load() >= 30
	})
	if c, d := connects.Load(), disconnects.Load(); c != 1 || d != 0 {
		t.Errorf("%d connects and %d disconnects over %d heartbeats, want one session throughout", c, d, beats.Load())
	}
}
