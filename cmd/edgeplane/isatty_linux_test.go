package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair with the standard library only: the controlling side
// (what a terminal emulator reads) and the terminal side (what a program writes to).
func openPTY(t *testing.T) (control, term *os.File) {
	t.Helper()
	control, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, control.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		control.Close()
		t.Skipf("unlockpt: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, control.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		control.Close()
		t.Skipf("ptsname: %v", errno)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		control.Close()
		t.Skipf("open the terminal side: %v", err)
	}
	return control, term
}

// A pseudo-terminal is a terminal; /dev/null, a character device too, is not.
func TestIsTerminalPTY(t *testing.T) {
	control, term := openPTY(t)
	defer control.Close()
	defer term.Close()
	if !isTerminal(term) {
		t.Error("a pseudo-terminal does not count as a terminal")
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Error("/dev/null counts as a terminal")
	}
}

// On a terminal, a restore that lasts longer than the interval shows its row count as it goes,
// on one redrawn line, and then says the backup is restored on a line of its own.
func TestImportProgressOnTerminal(t *testing.T) {
	backup := backupOf(t)
	defer func(old time.Duration) { progressInterval = old }(progressInterval)
	progressInterval = 5 * time.Millisecond
	control, term := openPTY(t)
	defer control.Close()
	screen := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, err := io.Copy(&b, control)
		if err != nil && !errors.Is(err, syscall.EIO) { // EIO: the terminal side closed
			b.WriteString("\nread error: " + err.Error())
		}
		screen <- b.Bytes()
	}()
	dst := filepath.Join(t.TempDir(), "dst.db")
	var stdout bytes.Buffer
	stdin := &slowReader{data: backup, pause: 2 * time.Millisecond}
	err := importBackup(context.Background(), []string{"--db", dst}, stdin, &stdout, term)
	term.Close()
	got := string(<-screen)
	if err != nil {
		t.Fatalf("%v; terminal:\n%s", err, got)
	}
	if !strings.Contains(got, "\redgeplane: import: ") || !strings.Contains(got, " rows restored so far (") {
		t.Fatalf("no progress on the terminal: %q", got)
	}
	if !strings.HasSuffix(got, "\r\nedgeplane: backup restored\r\n") {
		t.Errorf("the result is not on a line of its own after the progress line: %q", got)
	}
}
