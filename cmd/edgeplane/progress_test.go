package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// showProgress draws nothing for a command that ends within one interval, and otherwise
// redraws one line with the growing count and ends it with the final count and a newline.
func TestShowProgress(t *testing.T) {
	var n atomic.Int64
	var quiet bytes.Buffer
	showProgress(&quiet, "import", "rows restored", &n, time.Hour)()
	if quiet.Len() != 0 {
		t.Errorf("a quick command drew %q", quiet.String())
	}

	var out bytes.Buffer
	stop := showProgress(&out, "import", "rows restored", &n, 5*time.Millisecond)
	for i := 0; i < 10; i++ {
		n.Add(7)
		time.Sleep(5 * time.Millisecond)
	}
	n.Store(1234)
	stop()
	stop() // a second stop is harmless
	got := out.String()
	if !strings.HasPrefix(got, "\redgeplane: import: ") || strings.Count(got, "\r") < 2 {
		t.Fatalf("no redrawn progress line: %q", got)
	}
	if !regexp.MustCompile(`\redgeplane: import: 1234 rows restored so far \([0-9]+s\)\n$`).MatchString(got) {
		t.Errorf("the line does not end with the final count and a newline: %q", got)
	}
	if strings.Count(got, "\n") != 1 {
		t.Errorf("progress spans lines: %q", got)
	}
}

// A regular file, a pipe and a buffer are not terminals.
func TestIsTerminalNot(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, w := range map[string]io.Writer{"file": f, "pipe": w, "buffer": &bytes.Buffer{}} {
		if isTerminal(w) {
			t.Errorf("%s counts as a terminal", name)
		}
	}
}

// slowReader hands out its data a few bytes at a time with a pause before each read, so that
// a restore of a small backup lasts long enough to draw progress.
type slowReader struct {
	data  []byte
	pause time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.pause)
	n := copy(p[:min(len(p), 64)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// backupOf returns a backup of a new database holding one account and its API key.
func backupOf(t *testing.T) []byte {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src.db")
	newDatabase(t, src)
	var out, errb bytes.Buffer
	if err := runIO(context.Background(), []string{"apikey", "create", "--db", src, "--create-account"}, nil, &out, &errb); err != nil {
		t.Fatalf("apikey create: %v: %s", err, errb.String())
	}
	out.Reset()
	if err := runIO(context.Background(), []string{"export", "--db", src}, nil, &out, &errb); err != nil {
		t.Fatalf("export: %v: %s", err, errb.String())
	}
	return out.Bytes()
}

// Off a terminal, import says only that the backup is restored, however long it takes: a log
// or a script's output gets no progress lines.
func TestImportQuietOffTerminal(t *testing.T) {
	backup := backupOf(t)
	defer func(old time.Duration) { progressInterval = old }(progressInterval)
	progressInterval = time.Millisecond
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	dst := filepath.Join(t.TempDir(), "dst.db")
	var stdout bytes.Buffer
	stdin := &slowReader{data: backup, pause: 2 * time.Millisecond}
	if err := importBackup(context.Background(), []string{"--db", dst}, stdin, &stdout, stderr); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "edgeplane: backup restored\n" || stdout.Len() != 0 {
		t.Errorf("stderr %q, stdout %q; want only the line saying the backup is restored", got, stdout.String())
	}
}
