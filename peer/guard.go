package peer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// A peer is authenticated, but a replica with a bug, or a stolen certificate, must still not
// be able to make this one hold unbounded memory, panic or hang. muxado (v2.0.2) leaves some of
// that to its user:
//
//   - it buffers a whole DATA frame (up to 16 MiB) before it checks it against the stream's
//     window, and then keeps a stream it reset for overrunning its window for 5 s;
//   - when its accept queue is full it refuses a new stream with RST AcceptQueueFull but keeps
//     it, and what the peer sends on it, for the life of the session;
//   - it reads up to 1 MiB of a GOAWAY's text into memory, for every GOAWAY;
//   - it skips frames of unknown types, the sign of a peer out of step with its own frames.
//
// The link's framer sees every frame before muxado does and ends the link (a GOAWAY saying
// why, then the connection) on any of those, and on a stream opened by a peer that may open
// none: a replica opens streams only on the links it dialled. Ending the link fails its
// streams at once, and touches no other peer's.

// maxGoAway is the most a GOAWAY frame may take: its fixed fields and a line of text.
const maxGoAway = 8 + 1024

// guardError is why the framer ended a link.
type guardError struct {
	code muxado.ErrorCode
	msg  string
}

func (e *guardError) Error() string { return e.msg }

// errLinkEnding is the framer's answer for a frame written after the link's GOAWAY or a failed
// write.
var errLinkEnding = errors.New("peer: the link is ending")

// guardFramer is the framer of a link's muxado session (muxado.Config.NewFramer). It reads
// frames with muxado's own framer and checks each (read), and writes each frame of up to one
// TLS record with one Write on the connection, where muxado's framer writes a frame's header
// and its payload as two, each a TLS record of its own.
type guardFramer struct {
	frame.Framer               // muxado's framer: reads from the connection, writes to w
	w            *bufio.Writer // collects one frame, flushed at its end
	window       uint32        // the streams' window: no DATA frame may be larger
	mayOpen      bool          // whether the peer may open streams
	windows      *windows      // the streams' send windows, which the framer credits
	dog          *watchdog     // told of every frame read
	batch        *batchConn    // under the TLS connection: gathers each frame's records
	tripped      atomic.Pointer[guardError]
	// ending is set once a GOAWAY was written or a write failed; only muxado's writer
	// goroutine, the only caller of WriteFrame, reads or sets it.
	ending bool
}

// newGuardFramer returns the NewFramer of a link's session: mayOpen for the listening side,
// whose peer opens the streams, window the streams' window, ws their send windows, dog the
// link's watchdog, and bc the connection under the link's TLS.
func newGuardFramer(window uint32, mayOpen bool, ws *windows, dog *watchdog, bc *batchConn) func(io.Reader, io.Writer) frame.Framer {
	return func(rd io.Reader, wr io.Writer) frame.Framer {
		// A TLS record's payload (16 KiB) and a frame header: a frame that fits is written at
		// once; a larger one is written as one record and then straight from muxado's buffer.
		w := bufio.NewWriterSize(wr, 16<<10+8)
		return &guardFramer{Framer: frame.NewFramer(rd, w), w: w, window: window, mayOpen: mayOpen, windows: ws, dog: dog, batch: bc}
	}
}

// fail records why the link ends and returns the error that ends it.
func (f *guardFramer) fail(code muxado.ErrorCode, format string, args ...any) error {
	e := &guardError{code: code, msg: "peer: " + fmt.Sprintf(format, args...)}
	if !f.tripped.CompareAndSwap(nil, e) {
		return f.tripped.Load()
	}
	return e
}

// ReadFrame reads the next frame and checks it before muxado acts on it (a DATA frame's or a
// GOAWAY's payload is still unread); a frame it refuses ends the link.
func (f *guardFramer) ReadFrame() (frame.Frame, error) {
	if e := f.tripped.Load(); e != nil {
		return nil, e
	}
	fr, err := f.Framer.ReadFrame()
	if err != nil {
		return fr, err
	}
	f.dog.seen()
	if fr.StreamId()&(1<<31) != 0 {
		return nil, f.fail(muxado.ProtocolError, "a frame on stream id 0x%x, whose reserved bit is set", uint32(fr.StreamId()))
	}
	switch fr.Type() {
	case frame.TypeData:
		if n := fr.Length(); n > f.window {
			return nil, f.fail(muxado.FlowControlError, "a DATA frame of %d bytes, larger than the %d-byte window", n, f.window)
		}
		if !f.mayOpen && fr.Flags().IsSet(frame.FlagDataSyn) {
			return nil, f.fail(muxado.ProtocolError, "the listening replica opened a stream")
		}
	case frame.TypeGoAway:
		if n := fr.Length(); n > maxGoAway {
			return nil, f.fail(muxado.FrameSizeError, "a GOAWAY of %d bytes, more than %d", n, maxGoAway)
		}
	case frame.TypeWndInc:
		f.windows.credit(fr.StreamId(), fr.(*frame.WndInc).WindowIncrement())
	case frame.TypeRst:
		f.windows.reset(fr.StreamId())
	default:
		return nil, f.fail(muxado.ProtocolError, "a frame of unknown type %d", fr.Type())
	}
	return fr, nil
}

// WriteFrame writes fr in one Write when it fits one TLS record. A reset muxado writes because
// the peer overran a stream's window or filled the accept queue ends the link instead: muxado
// would keep the stream and its memory, and a replica never does either.
//
// Once a GOAWAY has been written, or a write failed, every later frame is refused without
// being looked at: muxado's writer can still hand over a frame whose stream's Write already
// returned on the session's end, and that stream may be packing its next frame into the same
// struct meanwhile.
func (f *guardFramer) WriteFrame(fr frame.Frame) error {
	if f.ending {
		return errLinkEnding
	}
	switch fr := fr.(type) {
	case *frame.GoAway:
		f.ending = true
		if e := f.tripped.Load(); e != nil {
			// muxado knows only its own errors: say why the framer ended the link.
			ga := new(frame.GoAway)
			if ga.Pack(fr.LastStreamId(), frame.ErrorCode(e.code), []byte(e.msg)) == nil {
				return f.write(ga)
			}
		}
	case *frame.Rst:
		switch muxado.ErrorCode(fr.ErrorCode()) {
		case muxado.FlowControlError:
			return f.fail(muxado.FlowControlError, "stream %d overran its window", fr.StreamId())
		case muxado.AcceptQueueFull:
			return f.fail(muxado.EnhanceYourCalm, "the peer opened streams faster than they were taken")
		}
		f.windows.reset(fr.StreamId())
	}
	if err := f.write(fr); err != nil {
		f.ending = true
		return err
	}
	return nil
}

// write renders fr into the buffer and writes it out, its TLS records in one system call.
func (f *guardFramer) write(fr frame.Frame) error {
	f.batch.arm()
	err := f.Framer.WriteFrame(fr)
	if err == nil {
		err = f.w.Flush()
	}
	if ferr := f.batch.flush(); err == nil {
		err = ferr
	}
	return err
}

// watchdog ends a link when nothing at all has been read from its peer for its timeout. Any
// frame counts, not only heartbeats: on a link busy with bulk transfers a ping can wait behind
// megabytes of data in either direction, while the data itself shows the peer alive. The
// dialler pings every interval, and the holder echoes, so an idle link hears from its peer
// that often too.
type watchdog struct {
	last    atomic.Int64 // when the framer last read a frame, in Unix nanoseconds
	timeout time.Duration
	fail    func(error)
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// newWatchdog returns a watchdog that calls fail once timeout has passed without a frame,
// counting from now, once started.
func newWatchdog(timeout time.Duration) *watchdog {
	w := &watchdog{timeout: timeout}
	w.seen()
	return w
}

// seen records that a frame was read.
func (w *watchdog) seen() { w.last.Store(time.Now().UnixNano()) }

// start arms the watchdog: fail is called, once, if the peer goes quiet.
func (w *watchdog) start(fail func(error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.fail = fail
	w.t = time.AfterFunc(w.timeout, w.check)
}

func (w *watchdog) check() {
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle >= w.timeout {
		w.fail(fmt.Errorf("nothing heard from the peer for %s (heartbeat)", idle.Round(time.Millisecond)))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Reset(w.timeout - idle)
	}
}

// stop disarms the watchdog.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
}
