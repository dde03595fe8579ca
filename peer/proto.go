package peer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
)

// Request is what a replica asks of the replica holding a tunnel for one public connection:
// the tunnel, by its row id, and the fields of the proxy header the agent is to be given, so
// the agent sees the connection exactly as if it had arrived at its own replica.
type Request struct {
	// TunnelID is the tunnel's row id (the API's "tn_…" id). Row ids are unique across
	// replicas, where the bind ids agents choose are not.
	TunnelID string `json:"tunnel"`
	// ClientAddr is the public client's ip:port.
	ClientAddr string `json:"client"`
	// Proto is the public connection's protocol as the proxy header names it ("" for the
	// tunnel's own).
	Proto string `json:"proto,omitempty"`
	// EdgeType is the proxy header's edge type: "" for endpoints, "1" TCP, "2" TLS, "3" HTTPS
	// edges.
	EdgeType string `json:"edge,omitempty"`
	// Passthrough reports that the client's TLS is carried untouched.
	Passthrough bool `json:"passthrough,omitempty"`
}

// Errors a dial returns, each wrapped with the replica and the detail (test with errors.Is):
// the public side answers ErrNoTunnel as an offline endpoint and the others as an agent that
// failed, or as it sees fit.
var (
	// ErrNoTunnel is the holder's answer when it holds no online tunnel with the row id: the
	// agent has gone (or moved) since the directory was read.
	ErrNoTunnel = errors.New("the replica holds no such tunnel")
	// ErrAgentDial is the holder's answer when it holds the tunnel but could not open a stream
	// to its agent.
	ErrAgentDial = errors.New("the replica could not open a stream to the agent")
	// ErrUnavailable is returned when the replica could not be asked: no link to it (nothing
	// listens, the handshake failed, a recent failure is being backed off), the link broke or
	// timed out before the answer, or the replica is at its limit of streams.
	ErrUnavailable = errors.New("the replica is unavailable")
)

// Bounds of the stream protocol.
const (
	// maxHeader is the most a stream's header may take, its kind and length included.
	maxHeader = 4 << 10
	// maxMessage is the most an error answer's text may take.
	maxMessage = 255
)

// The kinds of stream, the first byte the opener writes.
const (
	kindForward byte = 1 // a public connection for a tunnel: header, answer, then bytes
	kindPing    byte = 2 // the link's heartbeat: 8-byte pings, each echoed
)

// The holder's answers, the first byte it writes on a forward stream.
const (
	statusOK        byte = 0
	statusNoTunnel  byte = 1
	statusAgentDial byte = 2
	statusBusy      byte = 3 // the holder is at its limit of streams from this peer
)

// The shapes of a request's fields.
var (
	tunnelIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	protoPattern    = regexp.MustCompile(`^[a-z0-9+.-]{0,16}$`)
	edgeTypePattern = regexp.MustCompile(`^[0-9]{0,4}$`)
)

// validate says what is wrong with a request, nil when nothing: both ends check, so a replica
// neither sends nor acts on a request its peer would refuse.
func (r Request) validate() error {
	switch {
	case !tunnelIDPattern.MatchString(r.TunnelID):
		return fmt.Errorf("the tunnel id %.80q is not a row id", r.TunnelID)
	case !protoPattern.MatchString(r.Proto):
		return fmt.Errorf("the protocol %.40q is not one", r.Proto)
	case !edgeTypePattern.MatchString(r.EdgeType):
		return fmt.Errorf("the edge type %.40q is not one", r.EdgeType)
	}
	if _, err := netip.ParseAddrPort(r.ClientAddr); err != nil {
		return fmt.Errorf("the client address %.80q is not ip:port", r.ClientAddr)
	}
	return nil
}

// appendHeader appends a forward stream's header: its kind, the length of the request's JSON
// as two big-endian bytes, then the JSON.
func appendHeader(b []byte, r Request) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if 3+len(body) > maxHeader {
		return nil, fmt.Errorf("the request takes %d bytes, more than %d", 3+len(body), maxHeader)
	}
	b = append(b, kindForward)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...), nil
}

// errBadHeader marks a header that is not one: the peer is cut.
var errBadHeader = errors.New("peer: bad stream header")

// readRequest reads a forward stream's request, after its kind byte. It reads the length and
// then exactly that many bytes, never more than maxHeader, so whatever follows the header stays
// on the stream for the agent.
func readRequest(r io.Reader) (Request, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return Request{}, err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if 3+size > maxHeader {
		return Request{}, fmt.Errorf("%w: a request of %d bytes, more than %d", errBadHeader, size, maxHeader-3)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return Request{}, err
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, fmt.Errorf("%w: %v", errBadHeader, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, fmt.Errorf("%w: data after the request", errBadHeader)
	}
	if err := req.validate(); err != nil {
		return Request{}, fmt.Errorf("%w: %v", errBadHeader, err)
	}
	return req, nil
}

// appendAnswer appends the holder's answer: the status, and for a refusal the length of its
// message (one byte) and the message, cut to maxMessage bytes.
func appendAnswer(b []byte, status byte, msg string) []byte {
	b = append(b, status)
	if status == statusOK {
		return b
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	b = append(b, byte(len(msg)))
	return append(b, msg...)
}

// readAnswer reads the holder's answer. It returns nil for ok, one of the dial errors (wrapped
// with the message) for a refusal, and errBadHeader for an answer that is not one.
func readAnswer(r io.Reader) error {
	var st [2]byte
	if _, err := io.ReadFull(r, st[:1]); err != nil {
		return err
	}
	var kind error
	switch st[0] {
	case statusOK:
		return nil
	case statusNoTunnel:
		kind = ErrNoTunnel
	case statusAgentDial:
		kind = ErrAgentDial
	case statusBusy:
		kind = ErrUnavailable
	default:
		return fmt.Errorf("%w: answer status %d", errBadHeader, st[0])
	}
	if _, err := io.ReadFull(r, st[1:]); err != nil {
		return err
	}
	msg := make([]byte, st[1])
	if _, err := io.ReadFull(r, msg); err != nil {
		return err
	}
	return &refusal{kind: kind, msg: string(msg)}
}

// refusal is a holder's answer other than ok: one of the dial errors and the holder's message.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string {
	if r.msg == "" {
		return r.kind.Error()
	}
	return r.kind.Error() + ": " + r.msg
}

func (r *refusal) Unwrap() error { return r.kind }
