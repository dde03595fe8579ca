package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.ngrok.com/muxado/v2"
)

// streamTypeTimeout is how long an accepted stream may take to send its 4-byte type. Agents send
// the type with the stream's first frame, so a legitimate one never comes near it; the default
// is the handshake's. Each gateway keeps its own copy (Gateway.streamTypeTimeout), which tests
// shorten before serving.
const streamTypeTimeout = handshakeTimeout

// errNoStreamType is acceptTyped's error for a stream that did not send its type in time.
var errNoStreamType = errors.New("a stream sent no type")

// typedStream is an accepted stream with the type its agent sent first.
type typedStream struct {
	muxado.Stream
	typ muxado.StreamType
}

// StreamType is the type the agent opened the stream with.
func (t typedStream) StreamType() muxado.StreamType { return t.typ }

// acceptTyped accepts the agent's next stream and reads its type. muxado's
// TypedStreamSession.AcceptTypedStream reads the type with no deadline, on the session's one
// accept loop: a stream opened with no data held the loop, and with it every later request of
// the agent, for as long as the agent liked. Here the read is bounded by the gateway's
// streamTypeTimeout, and a stream whose type does not come in time, or comes short, ends the
// session like any other breach of the protocol.
func (s *session) acceptTyped() (muxado.TypedStream, error) {
	st, err := s.raw.AcceptStream()
	if err != nil {
		return nil, err
	}
	var typ [4]byte
	_ = st.SetReadDeadline(time.Now().Add(s.gw.streamTypeTimeout))
	_, err = io.ReadFull(st, typ[:])
	_ = st.SetReadDeadline(time.Time{})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("%w within %v (stream %d: %v)", errNoStreamType, s.gw.streamTypeTimeout, st.Id(), err)
	}
	return typedStream{st, muxado.StreamType(binary.BigEndian.Uint32(typ[:]))}, nil
}
