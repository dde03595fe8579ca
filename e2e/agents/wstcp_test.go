package agents

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/acceptguard"

	"github.com/coder/websocket"
	"golang.ngrok.com/ngrok/config"
)

// rawEcho accepts the tunnel's connections and treats each as a raw byte stream: every line read
// is answered upper-cased.
func rawEcho(t *testing.T, tun net.Listener) {
	go func() {
		for {
			c, err := acceptguard.Listener{Listener: tun}.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(strings.ToUpper(line))); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { tun.Close() })
}

// wsClient is an HTTP/1.1 client of the TLS listener for websockets, trusting edgeplane's CA.
func (w *world) wsClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, w.https)
		},
		TLSClientConfig: &tls.Config{RootCAs: w.ca},
	}}
}

// wsRoundTrip opens a websocket to url, sends a line split over a binary and a text message,
// and returns the answer's type and bytes.
func wsRoundTrip(t *testing.T, w *world, url string) (websocket.MessageType, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: w.wsClient()})
	if err != nil {
		t.Fatalf("websocket to %s: %v", url, err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageBinary, []byte("ping ")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("over tcp\n")); err != nil {
		t.Fatal(err)
	}
	typ, msg, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	return typ, string(msg)
}

// TestEdgeWebsocketTCPConverter: a route with websocket_tcp_converter accepts websockets itself
// and carries their payloads to the tunnel group's agent as a raw stream (the agent reads bytes,
// no HTTP), with the agent's bytes back as binary messages; a plain request gets 400
// ERR_NGROK_3206 and never reaches the agent.
func TestEdgeWebsocketTCPConverter(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	w.reserveDomain("ws.example.com")
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.LabeledTunnel(config.WithLabel("edge", "ws")))
	if err != nil {
		t.Fatalf("labeled tunnel: %v", err)
	}
	rawEcho(t, tun)
	group := w.mustCreate("/backends/tunnel_group", map[string]any{"labels": map[string]string{"edge": "ws"}})
	edge := w.mustCreate("/edges/https", map[string]any{"hostports": []string{"ws.example.com:443"}})
	route := w.mustCreate("/edges/https/"+edge+"/routes", map[string]any{"match_type": "path_prefix", "match": "/",
		"backend": map[string]any{"backend_id": group}})
	if st := w.call("PUT", "/edges/https/"+edge+"/routes/"+route+"/websocket_tcp_converter", map[string]any{"enabled": true}, nil); st != 200 {
		t.Fatalf("put websocket_tcp_converter: %d", st)
	}
	c := w.httpsClient()
	eventually(t, 5*time.Second, "the converter is in the plan", func() bool {
		resp, err := c.Get("https://ws.example.com/")
		if err != nil {
			return false // the host's certificate may not be in place yet
		}
		resp.Body.Close()
		return resp.StatusCode == 400 && resp.Header.Get("ngrok-error-code") == "ERR_NGROK_3206"
	})
	if typ, msg := wsRoundTrip(t, w, "wss://ws.example.com/socket"); typ != websocket.MessageBinary || msg != "PING OVER TCP\n" {
		t.Errorf("through the edge: %v %q, want a binary \"PING OVER TCP\\n\"", typ, msg)
	}
}

// TestAgentWebsocketTCPConverter: an agent endpoint bound with ngrok-go's
// WithWebsocketTCPConversion gets its websockets as raw streams, and plain requests are refused.
func TestAgentWebsocketTCPConverter(t *testing.T) {
	w := start(t)
	_, token := w.credential()
	sess := w.mustConnect(token)
	tun, err := sess.Listen(context.Background(), config.HTTPEndpoint(config.WithDomain("ws.edgeplane.app"), config.WithWebsocketTCPConversion()))
	if err != nil {
		t.Fatalf("listen with the converter: %v", err)
	}
	rawEcho(t, tun)
	st, _, h := get(t, w.httpsClient(), "https://ws.edgeplane.app/")
	if st != 400 || h.Get("ngrok-error-code") != "ERR_NGROK_3206" {
		t.Errorf("a plain request: %d %q, want 400 ERR_NGROK_3206", st, h.Get("ngrok-error-code"))
	}
	if typ, msg := wsRoundTrip(t, w, "wss://ws.edgeplane.app/"); typ != websocket.MessageBinary || msg != "PING OVER TCP\n" {
		t.Errorf("through the agent endpoint: %v %q", typ, msg)
	}
}
