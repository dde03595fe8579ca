package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often a long-running command redraws its progress line on a terminal.
var progressInterval = time.Second

// showProgress redraws "edgeplane: <what>: N <unit> so far (elapsed)" on w every interval,
// reading the count from n, until the returned stop is called. A line is drawn only once an
// interval has passed, so a quick command prints nothing; stop then ends a drawn line with the
// final count and a newline, so what follows starts on a line of its own. Callers use it only
// when w is a terminal: the carriage returns that redraw the line would litter a log.
func showProgress(w io.Writer, what, unit string, n *atomic.Int64, interval time.Duration) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	drawn := false
	draw := func() {
		elapsed := time.Since(start).Round(time.Second)
		fmt.Fprintf(w, "\redgeplane: %s: %d %s so far (%s)", what, n.Load(), unit, elapsed)
		drawn = true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				draw()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			if drawn {
				draw()
				fmt.Fprintln(w)
			}
		})
	}
}

// isTerminal reports whether w is a terminal: a file that is a character device and answers the
// terminal control request (see isatty). A pipe, a regular file and /dev/null are not.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	return isatty(f)
}
