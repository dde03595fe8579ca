package enforce

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/edgeplane/edgeplane/internal/outbound"
)

// DialFunc opens the connection to an upstream: the agent's proxy stream, or a static
// backend's address.
type DialFunc func(ctx context.Context) (net.Conn, error)

// WSTCP is the websocket_tcp_converter module: a request must be a websocket upgrade (anything
// else gets 400 ERR_NGROK_3206); edgeplane accepts the websocket itself and carries the payloads
// of the client's messages (binary or text) to the upstream as a raw byte stream, and the bytes
// the upstream sends back to the client as binary messages. The upstream sees no HTTP at all,
// only the bytes, so a browser can speak a TCP protocol (VNC, SSH, a database's) to it.
//
// Any origin may connect: the endpoint serves nothing but websockets, so the pages that use it
// are on other origins, as with ngrok's module. Put an IP restriction, JWT validation or OAuth in
// front of it to decide who may connect.
//
// The stage does not dial anything itself: it marks the request, and the final handler (which
// chooses the backend) hands it the backend's dial function through CarryRaw.
type WSTCP struct{}

// NewWSTCP builds the stage.
func NewWSTCP() *WSTCP { return &WSTCP{} }

// Name is the module's name.
func (*WSTCP) Name() string { return "websocket_tcp_converter" }

type rawCarrierKey struct{}

// rawCarrier carries a request's websocket to the upstream opened by dial.
type rawCarrier func(dial DialFunc)

// Wrap refuses requests that are not websocket upgrades, and marks the others so the final
// handler carries them as raw streams.
func (s *WSTCP) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isWebsocketUpgrade(r) {
			ErrorPage(w, r, http.StatusBadRequest, 3206, "This endpoint converts websockets to TCP: it expected a websocket request with a \"Connection: upgrade\" header but did not receive one.")
			return
		}
		// The carrier accepts the websocket on this stage's writer, not on whatever later
		// stages wrapped it in: the connection is handed over whole.
		carry := rawCarrier(func(dial DialFunc) { carryWebsocket(w, r, dial) })
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rawCarrierKey{}, carry)))
	})
}

// CarriesRaw reports whether a websocket_tcp_converter stage marked r, so that CarryRaw would
// carry it: a caller may then prepare for the raw stream what the usual path never needs.
func CarriesRaw(r *http.Request) bool {
	_, ok := r.Context().Value(rawCarrierKey{}).(rawCarrier)
	return ok
}

// CarryRaw is called by the final handler once it has chosen a backend that is reached by
// dialing: when a websocket_tcp_converter stage marked the request, CarryRaw carries it as a raw
// stream over dial and reports true (the request is answered); otherwise it does nothing and
// reports false.
func CarryRaw(r *http.Request, dial DialFunc) bool {
	carry, ok := r.Context().Value(rawCarrierKey{}).(rawCarrier)
	if !ok || dial == nil {
		return false
	}
	carry(dial)
	return true
}

// isWebsocketUpgrade reports whether r asks for a websocket (RFC 6455 section 4.2.1): a GET
// with Connection: upgrade and Upgrade: websocket.
func isWebsocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsBufSize is the largest message sent to the client: what one read of the upstream returns.
const wsBufSize = 32 << 10

// carryWebsocket opens the upstream first (so a backend that cannot be reached gets the usual
// 502 page rather than a websocket that closes at once), then accepts the websocket and pipes
// both ways until either side ends; then both are closed.
func carryWebsocket(w http.ResponseWriter, r *http.Request, dial DialFunc) {
	up, err := dial(r.Context())
	if err != nil {
		msg := err.Error()
		if refused, ok := outbound.Refused(err); ok { // a static backend's address the guard refused
			msg = refused.Reason() + " (--outbound-allow-private)"
		}
		ErrorPage(w, r, http.StatusBadGateway, 8012, "The upstream of this websocket could not be reached: "+msg)
		return
	}
	defer up.Close()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the client (a bad handshake gets 400 or 426)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1) // payloads are streamed, never held whole
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // client -> upstream
		defer wg.Done()
		defer up.Close()
		for {
			_, msg, err := ws.Reader(ctx)
			if err != nil {
				return
			}
			if _, err := io.Copy(up, msg); err != nil {
				return
			}
		}
	}()
	// upstream -> client
	buf := make([]byte, wsBufSize)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if werr := ws.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			status, reason := websocket.StatusNormalClosure, ""
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				status, reason = websocket.StatusGoingAway, "the upstream connection failed"
			}
			_ = ws.Close(status, reason)
			break
		}
	}
	cancel()
	_ = ws.CloseNow()
	wg.Wait()
}
