// Package serving holds the process settings that "edgeplane serve" and the benchmark's reference
// server share, so that what the benchmark profiles is what serve runs.
package serving

import (
	"io"
	"sync"
	"time"
)

// LogWriter writes the log lines of a busy server in batches. A server answering thousands of
// requests a second logs a line for each; one write system call per line was a tenth of the CPU
// of a create (measured with edgeplane-bench). Here a line is appended to a buffer, and a
// goroutine writes everything that arrived since its previous write with one call, and writes
// at most once a millisecond: an idle server's line is written at once, a busy server's in
// groups.
//
// Lines are written whole and in the order they were logged. Close writes what is left. Lines
// still in the buffer when the process is killed are lost: those of the last moments, on a busy
// server a few milliseconds at most.
type LogWriter struct {
	w io.Writer
	// wmu serialises the writes to w, so that a writer that flushes itself (the buffer is full)
	// and the goroutine never reorder lines.
	wmu sync.Mutex
	mu  sync.Mutex
	buf []byte
	// closed is set by Close; writes then go straight to w.
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

// logInterval is the shortest time between two writes of a LogWriter: a line waits at most
// that long, and a busy server writes its log at most a thousand times a second.
const logInterval = time.Millisecond

// maxLogBuffer is how much a LogWriter holds before a writer writes the buffer itself, so that
// a log destination slower than the logging cannot grow the buffer without bound.
const maxLogBuffer = 1 << 20

// NewLogWriter starts a LogWriter writing to w; Close stops it.
func NewLogWriter(w io.Writer) *LogWriter {
	b := &LogWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go b.loop()
	return b
}

// Write takes one log line (slog writes each record with one call).
func (b *LogWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wmu.Lock()
		defer b.wmu.Unlock()
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	full := len(b.buf) >= maxLogBuffer
	if !full {
		select { // under mu: Close closes wake only after setting closed
		case b.wake <- struct{}{}:
		default: // the goroutine is already due to write
		}
	}
	b.mu.Unlock()
	if full {
		b.flush(nil)
	}
	return len(p), nil
}

// flush writes what is buffered; spare is a buffer to continue with. It returns the buffer
// written, for reuse.
func (b *LogWriter) flush(spare []byte) []byte {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	out := b.buf
	b.buf = spare[:0]
	b.mu.Unlock()
	if len(out) > 0 {
		_, _ = b.w.Write(out) // a log destination that fails has nowhere to report it
	}
	return out
}

func (b *LogWriter) loop() {
	defer close(b.done)
	var spare []byte
	for range b.wake {
		spare = b.flush(spare)
		// At most one write per logInterval: what is logged meanwhile goes in the next one.
		time.Sleep(logInterval)
	}
	b.flush(nil)
}

// Close writes what is buffered; later lines are written directly.
func (b *LogWriter) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.wake)
	<-b.done
	return nil
}
