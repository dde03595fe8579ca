package peer

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.ngrok.com/muxado/v2/frame"
)

// A muxado stream's Write waits for window credit while holding the stream's write lock, and
// its Close half-closes first, which takes the same lock: Close on a stream whose peer stopped
// reading waits until the peer reads again or the link ends (muxado v2.0.2). A public
// connection closed because its agent stalled would hang its goroutine, and so would every
// stream's Close on a replica whose agent stopped reading.
//
// So the link keeps its own copy of each stream's send window, fed by the window increments its
// framer reads, and a stream's Write waits on it, where Close (and a write deadline) can end
// the wait, before it hands muxado no more than the window holds. muxado's own window then
// never makes a Write wait longer than the moment the framer takes to hand it the increment
// the link has already counted.

// sendWindow is the bytes a stream may still send before the peer returns credit.
type sendWindow struct {
	mu       sync.Mutex
	cond     sync.Cond
	avail    int64
	err      error
	deadline time.Time
	timer    *time.Timer
}

func newSendWindow(size uint32) *sendWindow {
	w := &sendWindow{avail: int64(size)}
	w.cond.L = &w.mu
	return w
}

// take waits until the window holds something, and takes up to n bytes of it.
func (w *sendWindow) take(n int) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.avail <= 0 && w.err == nil {
		if !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		w.cond.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	m := int(min(int64(n), w.avail))
	w.avail -= int64(m)
	return m, nil
}

// credit returns n bytes to the window: the peer read them.
func (w *sendWindow) credit(n uint32) {
	w.mu.Lock()
	w.avail += int64(n)
	w.cond.Broadcast()
	w.mu.Unlock()
}

// fail ends every wait, now and later, with err.
func (w *sendWindow) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}

// setDeadline makes take give up at t (zero: never).
func (w *sendWindow) setDeadline(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	if w.timer != nil {
		w.timer.Stop()
	}
	if !t.IsZero() {
		w.timer = time.AfterFunc(time.Until(t), func() {
			w.mu.Lock()
			w.cond.Broadcast()
			w.mu.Unlock()
		})
	}
	w.cond.Broadcast()
}

// windows are the send windows of one link's streams, by stream id; the link's framer credits
// them. The ping stream has none: its few bytes always fit.
type windows struct {
	mu   sync.Mutex
	byID map[frame.StreamId]*sendWindow
	err  error // set once the link has ended: every window made after fails at once
}

func newWindows() *windows { return &windows{byID: map[frame.StreamId]*sendWindow{}} }

// add makes the send window of stream id.
func (ws *windows) add(id uint32, size uint32) *sendWindow {
	w := newSendWindow(size)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.err != nil {
		w.fail(ws.err)
		return w
	}
	ws.byID[frame.StreamId(id)] = w
	return w
}

// remove forgets stream id's window and ends its waits with err.
func (ws *windows) remove(id uint32, err error) {
	ws.mu.Lock()
	w := ws.byID[frame.StreamId(id)]
	delete(ws.byID, frame.StreamId(id))
	ws.mu.Unlock()
	if w != nil {
		w.fail(err)
	}
}

// credit passes a window increment the framer read to its stream.
func (ws *windows) credit(id frame.StreamId, n uint32) {
	ws.mu.Lock()
	w := ws.byID[id]
	ws.mu.Unlock()
	if w != nil {
		w.credit(n)
	}
}

// reset ends the waits of a stream either side reset.
func (ws *windows) reset(id frame.StreamId) {
	ws.remove(uint32(id), errStreamReset)
}

// end ends the waits of every stream: the link has ended.
func (ws *windows) end(err error) {
	ws.mu.Lock()
	if ws.err == nil {
		ws.err = err
	}
	all := ws.byID
	ws.byID = map[frame.StreamId]*sendWindow{}
	ws.mu.Unlock()
	for _, w := range all {
		w.fail(err)
	}
}

// errStreamReset is a Write's error on a stream that was reset; errLinkDown on a link that
// ended.
var (
	errStreamReset = errors.New("peer: the stream was reset")
	errLinkDown    = errors.New("peer: the link to the peer is down")
)
