// Package tunnel is edgeplane's agent gateway: it accepts the TLS connections of ngrok's own
// agents and SDKs, speaks their protocol over muxado, checks
// their credentials and binds against the store, and keeps the registry of online tunnels that
// the public listeners dial. The protocol is written here from the spec; the multiplexer is
// golang.ngrok.com/muxado/v2.
package tunnel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.ngrok.com/muxado/v2"
)

// Stream types of the protocol: the opener writes the type as a big-endian uint32.
const (
	typeAuth         muxado.StreamType = 0
	typeBind         muxado.StreamType = 1
	typeUnbind       muxado.StreamType = 2
	typeProxy        muxado.StreamType = 3
	typeRestart      muxado.StreamType = 4
	typeStop         muxado.StreamType = 5
	typeUpdate       muxado.StreamType = 6
	typeLabel        muxado.StreamType = 7
	typeSrvInfo      muxado.StreamType = 8
	typeStopTunnel   muxado.StreamType = 9
	typePatchTunnel  muxado.StreamType = 10
	typeAgentMetrics muxado.StreamType = 11
)

// maxMessage bounds one JSON message from an agent. A Bind carries its options, including CA
// certificates and traffic policies, so it is allowed more than the few hundred bytes an Auth
// takes, but never an amount that could exhaust memory.
const maxMessage = 256 << 10

// rpcTimeout bounds the reading of one request and the writing of its reply.
const rpcTimeout = 10 * time.Second

// authMsg is the agent's Auth (type 0). Extra is decoded leniently: Go agents send Authtoken,
// Rust ones AuthToken, and Go's decoder matches field names without regard to case.
type authMsg struct {
	Version  []string
	ClientID string `json:"ClientId"`
	Extra    authExtra
}

type authExtra struct {
	OS, Arch, Authtoken, Version, Hostname, UserAgent, Metadata, Cookie string
	HeartbeatInterval, HeartbeatTolerance                               int64
	UpdateUnsupportedError, StopUnsupportedError                        *string
	RestartUnsupportedError                                             *string
	ClientType                                                          string
}

// authResp is the server's reply to Auth; Rust clients require Version and ClientId.
type authResp struct {
	Version  string
	ClientID string `json:"ClientId"`
	Error    string
	Extra    authRespExtra
}

type authRespExtra struct {
	Version         string
	Region          string
	Cookie          string
	AccountName     string
	SessionDuration int64
	PlanName        string
	Banner          string
}

// bindMsg is a Bind (type 1). Opts stays raw: the reply echoes it in full, with the client's own
// field names (Rust clients decode it strictly).
type bindMsg struct {
	ID            string `json:"Id"`
	Proto         string
	ForwardsTo    string
	ForwardsProto string
	Opts          json.RawMessage
	Extra         bindExtra
}

type bindExtra struct {
	Name, Token, IPPolicyRef, Metadata, Description string
	// Bindings are where the endpoint is reachable from: "public" (the default) or
	// "internal" (only from forward-internal; its URL must end in ".internal").
	Bindings       []string
	PoolingEnabled bool
}

type bindResp struct {
	ID    string `json:"Id"`
	URL   string
	Proto string
	Opts  json.RawMessage
	Error string
	Extra bindRespExtra
}

type bindRespExtra struct {
	Token string
}

type labelMsg struct {
	Labels        map[string]string
	ForwardsTo    string
	ForwardsProto string
	Metadata      string
}

type labelResp struct {
	ID    string `json:"Id"`
	Error string
}

type unbindMsg struct {
	ID string `json:"Id"`
}

type errorResp struct {
	Error string
}

type stopTunnelMsg struct {
	ID        string `json:"Id"`
	Message   string
	ErrorCode string
}

// ProxyHeader is what a proxy stream starts with. Rust clients require all five keys
// and EdgeType as a string.
type ProxyHeader struct {
	ID             string `json:"Id"`
	ClientAddr     string
	Proto          string
	EdgeType       string
	PassthroughTLS bool
}

// errMessageTooLarge is a request over maxMessage.
var errMessageTooLarge = errors.New("message too large")

// readJSON decodes one JSON value from a stream, bounded in size and time. Rust clients neither
// end the request with a newline nor half-close it, so the decoder must stop at the value's end.
func readJSON(conn net.Conn, v any) error {
	_ = conn.SetReadDeadline(time.Now().Add(rpcTimeout))
	lr := &io.LimitedReader{R: conn, N: maxMessage + 1}
	err := json.NewDecoder(lr).Decode(v)
	if lr.N <= 0 {
		return errMessageTooLarge
	}
	return err
}

// writeReply writes one JSON reply and half-closes the stream: Rust clients read replies to EOF.
func writeReply(stream muxado.Stream, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_ = stream.SetWriteDeadline(time.Now().Add(rpcTimeout))
	if _, err := stream.Write(body); err != nil {
		return err
	}
	return stream.CloseWrite()
}

// errorText formats an error for the Error field of a reply: the message, a blank line, and
// the code on its own line, the way the clients extract it.
func errorText(code int, format string, args ...any) string {
	return fmt.Sprintf(format, args...) + "\r\n\r\nERR_NGROK_" + fmt.Sprint(code) + "\r\n"
}

// writeProxyHeader writes the start of a proxy stream: the header's length as a little-endian
// int64, then the header's JSON.
func writeProxyHeader(w io.Writer, h ProxyHeader) error {
	body, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Grow(8 + len(body))
	_ = binary.Write(&buf, binary.LittleEndian, int64(len(body)))
	buf.Write(body)
	_, err = w.Write(buf.Bytes())
	return err
}
