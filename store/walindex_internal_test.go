package store

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/edgeplane/edgeplane/internal/benchcpu"
)

// shmFile writes a -shm file for db whose header copies are first and second (isInit set in
// both), padded to a page.
func shmFile(t testing.TB, db string, first, second walVersion) {
	t.Helper()
	first[12], second[12] = 1, 1
	buf := make([]byte, os.Getpagesize())
	copy(buf, first[:])
	copy(buf[walHeaderSize:], second[:])
	if err := os.WriteFile(db+"-shm", buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWALIndexHeader reads a header through the mapping as the pread did: two equal copies are
// the header, two different ones (a write in progress) are no header, a change of the file is
// seen by the next read, and a file truncated under the mapping is a failed read, not a crash.
func TestWALIndexHeader(t *testing.T) {
	db := filepath.Join(t.TempDir(), "x.db")
	var v walVersion
	v[8], v[16] = 7, 42 // iChange, mxFrame
	shmFile(t, db, v, v)
	w, err := openWALIndexFile(db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if runtime.GOOS == "linux" && w.mem == nil {
		t.Fatal("the -shm file's first page is not mapped")
	}
	got, ok := w.header()
	if !ok || got.changes() != 7 || got.frames() != 42 {
		t.Fatalf("header %v, %v; want changes 7, frames 42", got, ok)
	}

	// A writer between its two writes: the second copy is new, the first still old.
	next := v
	next[8] = 8
	f, err := os.OpenFile(db+"-shm", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next[12] = 1
	if _, err := f.WriteAt(next[:], walHeaderSize); err != nil {
		t.Fatal(err)
	}
	if got, ok := w.header(); ok {
		t.Fatalf("two different copies read as header %v", got)
	}
	if _, err := f.WriteAt(next[:], 0); err != nil {
		t.Fatal(err)
	}
	if got, ok := w.header(); !ok || got.changes() != 8 {
		t.Fatalf("after the write: header %v, %v; want changes 8", got, ok)
	}

	// Another program truncates the file: the mapped page is gone.
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if got, ok := w.header(); ok {
		t.Fatalf("a truncated file read as header %v", got)
	}
	if !w.faulted.Load() && w.mem != nil {
		t.Fatal("the read of the truncated mapping did not fault")
	}
	// Written again (SQLite reinitialises a -shm file it finds empty): read with pread now.
	shmFile(t, db, next, next)
	if got, ok := w.header(); !ok || got.changes() != 8 {
		t.Fatalf("after the file was written again: header %v, %v; want changes 8", got, ok)
	}
}

// BenchmarkWALHeader is the read of the wal-index header that every request answered from the
// read cache makes, through the mapping and with pread:
// go test -run XXX -bench WALHeader ./store/
func BenchmarkWALHeader(b *testing.B) {
	db := filepath.Join(b.TempDir(), "x.db")
	var v walVersion
	shmFile(b, db, v, v)
	for _, mode := range []string{"mapped", "pread"} {
		b.Run(mode, func(b *testing.B) {
			w, err := openWALIndexFile(db)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			if mode == "pread" {
				unmapPage(w.mem)
				w.mem = nil
			}
			b.ReportAllocs()
			benchcpu.PerOp(b)
			for b.Loop() {
				if _, ok := w.header(); !ok {
					b.Fatal("no header")
				}
			}
		})
	}
}
