package serving

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination that counts the writes it gets.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) snapshot() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.writes
}

// Every line of concurrent loggers arrives whole, each logger's in its order, also past the
// buffer's bound; a busy logger's lines are written in a few writes, not one each.
func TestLogWriterKeepsEveryLineInOrder(t *testing.T) {
	dst := &lockedBuffer{}
	w := NewLogWriter(dst)
	const loggers, lines = 8, 2000
	pad := strings.Repeat("x", 600) // 8×2000×600 bytes: the buffer fills up and is flushed by writers too
	var wg sync.WaitGroup
	for g := range loggers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(w, "logger=%d line=%d %s\n", g, i, pad)
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, writes := dst.snapshot()
	next := make([]int, loggers)
	n := 0
	for line := range strings.Lines(out) {
		var g, i int
		var rest string
		if _, err := fmt.Sscanf(line, "logger=%d line=%d %s\n", &g, &i, &rest); err != nil || rest != pad {
			t.Fatalf("line %d is not whole: %.80q (%v)", n, line, err)
		}
		if i != next[g] {
			t.Fatalf("logger %d: line %d came after line %d", g, i, next[g]-1)
		}
		next[g]++
		n++
	}
	if n != loggers*lines {
		t.Fatalf("%d lines written, want %d", n, loggers*lines)
	}
	if writes > n/10 {
		t.Fatalf("%d writes for %d lines: not batched", writes, n)
	}
}

// A steady logger, a line every 50µs like a busy server's requests, is written about once per
// logInterval, not once per line.
func TestLogWriterGroupsASteadyLogger(t *testing.T) {
	dst := &lockedBuffer{}
	w := NewLogWriter(dst)
	const lines = 2000
	for i := range lines {
		fmt.Fprintf(w, "line=%d\n", i)
		for start := time.Now(); time.Since(start) < 50*time.Microsecond; {
		}
	}
	w.Close()
	out, writes := dst.snapshot()
	if strings.Count(out, "\n") != lines {
		t.Fatalf("%d lines written, want %d", strings.Count(out, "\n"), lines)
	}
	if writes > lines/4 {
		t.Fatalf("%d writes for %d lines a line every 50µs: not grouped", writes, lines)
	}
}

// A line of an idle server is written without waiting for more, and lines after Close are
// written directly.
func TestLogWriterWritesPromptly(t *testing.T) {
	dst := &lockedBuffer{}
	w := NewLogWriter(dst)
	fmt.Fprintln(w, "first")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if out, _ := dst.snapshot(); out == "first\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lone line was not written")
		}
		time.Sleep(time.Millisecond)
	}
	w.Close()
	fmt.Fprintln(w, "after close")
	if out, _ := dst.snapshot(); out != "first\nafter close\n" {
		t.Fatalf("log %q", out)
	}
}
