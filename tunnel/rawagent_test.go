package tunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// testGateway is a gateway serving agents on loopback, over a SQLite store with one credential.
type testGateway struct {
	gw    *Gateway
	addr  string
	pool  *x509.CertPool
	token string // the credential's authtoken
}

// startGateway runs a gateway for the test, with a certificate for 127.0.0.1; each before
// function changes the gateway before it serves (and so before any session reads it).
func startGateway(t *testing.T, before ...func(*Gateway)) *testGateway {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "edgeplane.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	admin, _, err := st.EnsureAccount(ctx, "guard")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := st.Create(ctx, admin, ep.Credentials, "", &ep.CredentialCreate{})
	if err != nil {
		t.Fatal(err)
	}
	cert, pool := selfSigned(t, "agents.test")
	gw := New(Config{Store: st, Settings: ep.DefaultSettings(), Replica: "rep_guard", Version: "test",
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	for _, f := range before {
		f(gw)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() { gw.Close(); ln.Close() })
	return &testGateway{gw: gw, addr: ln.Addr().String(), pool: pool, token: *doc.(*ep.Credential).Token}
}

// rawAgent is a hostile agent: it writes muxado frames of its own making over a real TLS
// connection, and records the frames edgeplane sends back.
type rawAgent struct {
	t    *testing.T
	conn *tls.Conn

	mu      sync.Mutex
	rsts    map[muxado.ErrorCode]int // RST frames received, by error code
	goAways int
	code    muxado.ErrorCode // the GOAWAY's error code
	debug   string           // and its text
	data    map[uint32][]byte
	fins    map[uint32]bool
	wndincs map[uint32]int    // WNDINC frames received, by stream
	credit  map[uint32]uint32 // and the window they granted
	ended   chan struct{}     // closed when edgeplane's side of the connection has ended
}

// dialRaw connects a raw agent to the gateway.
func dialRaw(t *testing.T, g *testGateway) *rawAgent {
	t.Helper()
	conn, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: g.pool, ServerName: "agents.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a := &rawAgent{t: t, conn: conn, rsts: map[muxado.ErrorCode]int{}, data: map[uint32][]byte{},
		fins: map[uint32]bool{}, wndincs: map[uint32]int{}, credit: map[uint32]uint32{}, ended: make(chan struct{})}
	go a.readLoop()
	return a
}

// readLoop reads edgeplane's frames until the connection ends.
func (a *rawAgent) readLoop() {
	defer close(a.ended)
	fr := frame.NewFramer(a.conn, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *frame.Data:
			b, err := io.ReadAll(f.Reader())
			if err != nil {
				return
			}
			a.mu.Lock()
			a.data[uint32(f.StreamId())] = append(a.data[uint32(f.StreamId())], b...)
			if f.Fin() {
				a.fins[uint32(f.StreamId())] = true
			}
			a.mu.Unlock()
		case *frame.Rst:
			a.mu.Lock()
			a.rsts[muxado.ErrorCode(f.ErrorCode())]++
			a.mu.Unlock()
		case *frame.WndInc:
			a.mu.Lock()
			a.wndincs[uint32(f.StreamId())]++
			a.credit[uint32(f.StreamId())] += f.WindowIncrement()
			a.mu.Unlock()
		case *frame.GoAway:
			b, err := io.ReadAll(f.Debug())
			if err != nil {
				return
			}
			a.mu.Lock()
			a.goAways++
			a.code, a.debug = muxado.ErrorCode(f.ErrorCode()), string(b)
			a.mu.Unlock()
		}
	}
}

// rawHeader is a frame header as the protocol lays it out, with any
// values, valid or not.
func rawHeader(length int, typ frame.Type, flags frame.Flags, id uint32) []byte {
	b := make([]byte, frameHeaderLen)
	b[0], b[1], b[2] = byte(length>>16), byte(length>>8), byte(length)
	b[3] = byte(typ)<<4 | byte(flags)
	binary.BigEndian.PutUint32(b[4:], id)
	return b
}

// rawFrame is a whole frame: its header and payload.
func rawFrame(typ frame.Type, flags frame.Flags, id uint32, payload []byte) []byte {
	return append(rawHeader(len(payload), typ, flags, id), payload...)
}

// typed is the payload that opens a typed stream: its type, then body.
func typed(typ muxado.StreamType, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(typ)), body...)
}

// send writes frames to edgeplane; an error means edgeplane has closed the connection.
func (a *rawAgent) send(frames ...[]byte) error {
	var b []byte
	for _, f := range frames {
		b = append(b, f...)
	}
	_ = a.conn.SetWriteDeadline(time.Now().Add(time.Minute)) // against a hang, not a measure
	_, err := a.conn.Write(b)
	return err
}

// auth authenticates on stream 3 and waits for a successful AuthResp.
func (a *rawAgent) auth(token string) {
	a.t.Helper()
	body, _ := json.Marshal(map[string]any{"Version": []string{"3", "2"}, "ClientId": "", "Extra": map[string]any{
		"Authtoken": token, "UserAgent": "streamguard-test", "HeartbeatInterval": int64(5 * time.Minute),
		"HeartbeatTolerance": int64(5 * time.Minute)}})
	if err := a.send(rawFrame(frame.TypeData, frame.FlagDataSyn, 3, typed(typeAuth, body))); err != nil {
		a.t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.mu.Lock()
		done, reply := a.fins[3], a.data[3]
		a.mu.Unlock()
		if done {
			var resp authResp
			if err := json.Unmarshal(reply, &resp); err != nil || resp.Error != "" || resp.ClientID == "" {
				a.t.Fatalf("Auth answered %q (%v)", reply, err)
			}
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatal("no AuthResp within 30 s")
		}
	}
}

// waitEnded waits for edgeplane to end the session and returns the GOAWAY's code and text;
// ok is false if the session was still open after 30 s.
func (a *rawAgent) waitEnded() (code muxado.ErrorCode, debug string, ok bool) {
	select {
	case <-a.ended:
	case <-time.After(30 * time.Second):
		return 0, "", false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.goAways == 0 {
		return muxado.ErrorUnknown, "no GOAWAY", true
	}
	return a.code, a.debug, true
}
