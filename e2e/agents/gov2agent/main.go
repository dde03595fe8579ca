// Command gov2agent is an ngrok-go v2 agent for edgeplane's end-to-end tests. It runs in its own
// process because ngrok-go v1 and v2 register the same protobuf file and so cannot share one
// binary (the v1 tests' binary panics at start when both are linked).
//
// It connects to -server with the CA in -ca and the token in -token, opens one endpoint for -url
// (with agent.Listen, answering every request itself, or with agent.Forward to -upstream), and
// prints one JSON line per event on stdout: {"event":"connected"}, {"event":"endpoint","url":…},
// or {"event":"error","stage":…,"code":"ERR_NGROK_…","message":…} (then it exits with status 2).
// It serves until its standard input closes.
package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	ngrok "golang.ngrok.com/ngrok/v2"
)

func main() {
	server := flag.String("server", "", "the agent listener's host:port")
	caFile := flag.String("ca", "", "a PEM file with the CA that signs the agent listener's certificate")
	token := flag.String("token", "", "the credential's token")
	endpointURL := flag.String("url", "", "the endpoint's URL (WithURL)")
	upstream := flag.String("upstream", "", "forward to this upstream URL instead of answering requests")
	connectTimeout := flag.Duration("connect-timeout", 10*time.Second, "how long Connect may retry")
	flag.Parse()

	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fail("setup", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		fail("setup", fmt.Errorf("no certificate in %s", *caFile))
	}
	agent, err := ngrok.NewAgent(
		ngrok.WithAgentConnectURL(*server),
		ngrok.WithAgentConnectCAs(pool),
		ngrok.WithAuthtoken(*token),
	)
	if err != nil {
		fail("setup", err)
	}

	// The context given to Connect is the session's lifetime: ngrok-go ends the session with it.
	// A refused Auth is retried until the timeout, and then Connect returns the refusal.
	sessionCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(*connectTimeout, cancel)
	if err := agent.Connect(sessionCtx); err != nil {
		fail("connect", err)
	}
	timer.Stop()
	emit(map[string]string{"event": "connected"})

	ctx := context.Background()
	var url string
	if *upstream != "" {
		fwd, err := agent.Forward(ctx, ngrok.WithUpstream(*upstream), ngrok.WithURL(*endpointURL))
		if err != nil {
			fail("forward", err)
		}
		url = fwd.URL().String()
	} else {
		l, err := agent.Listen(ctx, ngrok.WithURL(*endpointURL))
		if err != nil {
			fail("listen", err)
		}
		url = l.URL().String()
		go func() { _ = http.Serve(l, http.HandlerFunc(answer)) }()
	}
	emit(map[string]string{"event": "endpoint", "url": url})

	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = agent.Disconnect()
}

// answer tells the public client what the agent received.
func answer(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "ngrok-go v2 host=%s xff=%s xfp=%s xfh=%s path=%s", r.Host, r.Header.Get("X-Forwarded-For"),
		r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"), r.URL.Path)
}

// emit prints one event as a JSON line.
func emit(event map[string]string) {
	b, _ := json.Marshal(event)
	fmt.Println(string(b))
}

// fail prints the error event of stage, with the error's ERR_NGROK code when it has one, and
// exits with status 2.
func fail(stage string, err error) {
	event := map[string]string{"event": "error", "stage": stage, "message": err.Error()}
	var ne ngrok.Error
	if errors.As(err, &ne) {
		event["code"] = ne.Code()
	}
	emit(event)
	os.Exit(2)
}
