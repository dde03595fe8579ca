package agents

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/ngrok/config"
)

func TestClusterSmoke(t *testing.T) {
	c := startCluster(t)
	_, token := c.lb.credential()
	sess := c.lb.mustConnect(token)
	if err := listenAnswer(t, sess, "smoke.edgeplane.app", "smoke"); err != nil {
		t.Fatal(err)
	}
	_ = config.HTTPEndpoint
	_ = context.Background
	c.waitServed("https://smoke.edgeplane.app/", "smoke")
	for i := range 30 {
		st, body, h := get(t, c.lb.httpsClient(), "https://smoke.edgeplane.app/")
		if st != 200 || !strings.Contains(body, "smoke") {
			t.Fatalf("request %d: %d %s %v", i, st, body, h.Get("ngrok-error-code"))
		}
	}
	_ = time.Second
}
