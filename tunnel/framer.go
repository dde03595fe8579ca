package tunnel

import (
	"errors"
	"io"
	"sync"

	"golang.ngrok.com/muxado/v2/frame"
)

const (
	// frameHeaderLen is the length of a muxado frame header (length, type and flags, stream id).
	frameHeaderLen = 8
	// maxCoalesced caps the bytes of one frame (header and payload) written in one Write: the
	// most a TLS record carries (16 KiB). A larger frame is written as muxado writes it, its
	// header (and fixed body) and then its payload straight from the stream's buffer: the TLS
	// connection splits such a payload into records of 16 KiB, one write system call each, so a
	// copy would save at most one record of several.
	maxCoalesced = 16 << 10
	// inlineLen is the size of the buffer each session keeps for the frames most often written
	// (window increments, resets, heartbeats, request and response heads); larger frames borrow
	// a buffer of maxCoalesced bytes from a pool, so an idle session holds no large buffer.
	inlineLen = 512
)

// bigBufs holds the buffers of maxCoalesced bytes lent to one WriteFrame at a time.
var bigBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxCoalesced); return &b }}

// singleWriteFramer is the framer of edgeplane's muxado sessions (muxado.Config.NewFramer). It
// reads frames exactly as muxado's own framer does, and writes each frame of up to maxCoalesced
// bytes with one Write on the transport, where muxado's framer writes a frame's 8-byte header
// and its payload as two Writes: over the agent's TLS connection, two TLS records and two write
// system calls for every frame.
//
// It renders each frame with muxado's own encoding (so every frame type is written exactly as
// muxado writes it: DATA, RST, WNDINC, and GOAWAY with its debug payload) into a buffer, then
// writes the buffer before WriteFrame returns: nothing is held back for a later frame. muxado's
// session calls WriteFrame from its one writer goroutine only; the type is not safe for
// concurrent WriteFrame calls.
//
// Every frame read and written also passes the session's stream guard (streamguard.go), which
// ends the session when the agent holds more streams or unread bytes than it may.
type singleWriteFramer struct {
	frame.Framer              // muxado's framer: reads from the transport, renders into r
	r            renderBuf    // where the embedded framer's writes go
	guard        *streamGuard // bounds the agent's streams
	inline       [inlineLen]byte
	// wmu serialises writes to the transport: muxado's writer goroutine writes its frames, and
	// the reader goroutine writes the echoes of pings it answers itself (beat.go).
	wmu sync.Mutex
	// ending is set once a GOAWAY was written or a write failed (WriteFrame); only muxado's
	// writer goroutine reads or sets it.
	ending bool
	// What the reader goroutine keeps to answer pings (beat.go): the bytes of a ping read so
	// far, a buffer to read into, and the frame of the echo.
	ping    [4]byte
	pingLen int
	scratch [64]byte
	echo    frame.Data
}

// newSingleWriteFramer makes the framer of one session, with a guard holding the agent to the
// limits of an authenticated agent; its signature is muxado.Config.NewFramer.
func newSingleWriteFramer(rd io.Reader, wr io.Writer) frame.Framer {
	return newStreamGuard().framer(rd, wr)
}

// framer makes the framer of the session g guards; its signature is muxado.Config.NewFramer.
func (g *streamGuard) framer(rd io.Reader, wr io.Writer) frame.Framer {
	f := &singleWriteFramer{r: renderBuf{w: wr}, guard: g}
	f.Framer = frame.NewFramer(rd, &f.r)
	return f
}

// ReadFrame reads the next frame from the agent and lets the guard check it before muxado acts
// on it; a frame the guard refuses ends the session. Pings on the agent's heartbeat stream are
// answered here and not handed to muxado (beat.go).
func (f *singleWriteFramer) ReadFrame() (frame.Frame, error) {
	for {
		fr, err := f.Framer.ReadFrame()
		if err != nil {
			return fr, err
		}
		if err := f.guard.read(fr); err != nil {
			return nil, err
		}
		if !f.guard.isBeat(fr) {
			return fr, nil
		}
		if err := f.answerBeat(fr); err != nil {
			return nil, err
		}
	}
}

// WriteFrame renders fr and writes it to the transport: in one Write if the whole frame fits in
// maxCoalesced bytes, else in two. When the guard ends the session on seeing fr, it writes the
// guard's GOAWAY in its place and returns the guard's error, which ends muxado's session.
//
// Once a GOAWAY has been written, or a write has failed, the session is ending and every later
// frame is refused without being looked at. muxado's writer can still hand over a frame whose
// stream's Write already returned on the session's end, and that stream may be packing its next
// frame into the same struct meanwhile (a data race `go test -race` reported at the end of a
// hostile agent's session); muxado writes a GOAWAY only as its session dies, and edgeplane never
// sends one otherwise, so after it nothing is left to deliver.
func (f *singleWriteFramer) WriteFrame(fr frame.Frame) error {
	if f.ending {
		return errSessionEnding
	}
	_, goAway := fr.(*frame.GoAway)
	fr, gerr := f.guard.wrote(fr)
	if fr == nil {
		return gerr // window credit the guard holds back
	}
	if _, guardGoAway := fr.(*frame.GoAway); goAway || guardGoAway {
		f.ending = true
	}
	if err := f.write(fr); err != nil {
		f.ending = true
		return err
	}
	return gerr
}

// errSessionEnding is WriteFrame's answer for a frame after the session's GOAWAY or a failed write.
var errSessionEnding = errors.New("edgeplane: the agent session is ending")

// write renders fr and writes it to the transport.
func (f *singleWriteFramer) write(fr frame.Frame) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	var big *[]byte
	switch size := frameHeaderLen + int(fr.Length()); {
	case size <= inlineLen:
		f.r.buf = f.inline[:0]
	case size <= maxCoalesced:
		big = bigBufs.Get().(*[]byte)
		f.r.buf = (*big)[:0]
	default:
		// Room for the header and a fixed body (GOAWAY's is the longest, 8 bytes); the
		// payload does not fit and goes straight to the transport.
		f.r.buf = f.inline[:0]
	}
	err := f.Framer.WriteFrame(fr)
	if ferr := f.r.flush(); err == nil {
		err = ferr
	}
	f.r.buf = nil
	if big != nil {
		bigBufs.Put(big)
	}
	return err
}

// renderBuf collects the Writes muxado's encoding makes for one frame.
type renderBuf struct {
	w   io.Writer
	buf []byte // its capacity is the most it may hold; it is never grown
}

// Write appends p to the frame being rendered; if p does not fit, it writes what is rendered
// so far and then p itself to the transport.
func (r *renderBuf) Write(p []byte) (int, error) {
	if len(r.buf)+len(p) <= cap(r.buf) {
		r.buf = append(r.buf, p...)
		return len(p), nil
	}
	if err := r.flush(); err != nil {
		return 0, err
	}
	return r.w.Write(p)
}

// flush writes what is rendered to the transport and empties the buffer.
func (r *renderBuf) flush() error {
	if len(r.buf) == 0 {
		return nil
	}
	n, err := r.w.Write(r.buf)
	if err == nil && n != len(r.buf) {
		err = io.ErrShortWrite
	}
	r.buf = r.buf[:0]
	return err
}
