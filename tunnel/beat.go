package tunnel

import (
	"io"

	"golang.ngrok.com/muxado/v2/frame"
)

// Answering pings in the read path. An idle agent session's only traffic is its heartbeat: a
// 4-byte ping every interval, echoed. Through muxado each ping woke three goroutines (muxado's
// reader, which buffers it in the stream; the echo goroutine reading it; muxado's writer,
// writing the echo), and with the process otherwise idle each wake-up woke a thread: at 10,000
// sessions, ~1,000 pings a second, that was most of edgeplane's CPU at rest. Once the session has
// taken the heartbeat stream (heartbeat.go), the framer answers its pings as it reads them, on
// muxado's reader goroutine: it reads the ping, writes the same bytes back as a DATA frame of the
// stream (under the transport's write lock, which muxado's writer takes too), resets the
// session's watchdog, and owes the agent the window credit, sent in batches (streamguard.go).
// muxado never sees these frames, nor the agent's credit for the echoes it did not write. The
// stream's SYN and FIN still go to muxado, and bytes muxado buffered before the stream was
// taken are echoed by the session's echo goroutine: an agent pings again only once its last ping
// came back, so the two never answer out of order.

// answerBeat reads a DATA frame of the heartbeat stream and echoes every whole ping in it; the
// agent's credit for echoes (a WNDINC of the stream) needs nothing.
func (f *singleWriteFramer) answerBeat(fr frame.Frame) error {
	d, ok := fr.(*frame.Data)
	if !ok {
		return nil
	}
	rd := d.Reader()
	for left := int(d.Length()); left > 0; {
		n, err := io.ReadFull(rd, f.scratch[:min(left, len(f.scratch))])
		left -= n
		if err != nil {
			return err
		}
		for _, b := range f.scratch[:n] {
			f.ping[f.pingLen] = b
			if f.pingLen++; f.pingLen < len(f.ping) {
				continue
			}
			f.pingLen = 0
			if err := f.echo.Pack(d.StreamId(), f.ping[:], false, false); err != nil {
				return err
			}
			if err := f.write(&f.echo); err != nil {
				return err
			}
		}
	}
	credit, onPing := f.guard.answeredBeat(int(d.Length()))
	if credit != nil {
		if err := f.write(credit); err != nil {
			return err
		}
	}
	if onPing != nil {
		onPing()
	}
	return nil
}
