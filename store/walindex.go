package store

import (
	"encoding/binary"
	"os"
	"runtime/debug"
	"sync/atomic"
	"unsafe"
)

// walIndex reads the wal-index header of a SQLite database (the first bytes of its -shm file),
// which the read cache reads on every request and the checkpointer after commits.
//
// Where the system allows it, the header is read through a read-only shared mapping of the
// file's first page, as SQLite's own connections in this process read it, instead of with a
// pread system call: the system call was about a twentieth of the CPU time of a GET answered
// from the read cache. Both read the same bytes of the same shared pages, so what a read can
// see (a header being written shows two different copies, and is not used) is the same. A
// mapping can fault where a read returns short, if another program truncated the file; the
// read runs with debug.SetPanicOnFault, so a fault is a failed read (and the pread tells the
// rest), never a crash.
type walIndex struct {
	f *os.File
	// mem is the mapped first page of the file, or nil where it could not be mapped.
	mem []byte
	// faulted is set once a read of mem has faulted; later reads use pread only.
	faulted atomic.Bool
}

// openWALIndexFile opens the -shm file of the database at path and maps its first page.
func openWALIndexFile(path string) (*walIndex, error) {
	f, err := os.Open(path + "-shm")
	if err != nil {
		return nil, err
	}
	return &walIndex{f: f, mem: mapFirstPage(f)}, nil
}

// Close unmaps the page and closes the file, when the store closes.
func (w *walIndex) Close() error {
	unmapPage(w.mem)
	w.mem = nil
	return w.f.Close()
}

// header reads the wal-index header; ok is false while it is being written (the two copies
// differ) or when it cannot be read.
func (w *walIndex) header() (v walVersion, ok bool) {
	var buf [2 * walHeaderSize]byte
	if !w.readMapped(&buf) {
		if n, err := w.f.ReadAt(buf[:], 0); n != len(buf) || err != nil {
			return v, false
		}
	}
	// Byte 12 is isInit; the copies differ while a writer is between its two writes.
	if buf[12] != 1 || [walHeaderSize]byte(buf[:walHeaderSize]) != [walHeaderSize]byte(buf[walHeaderSize:]) {
		return v, false
	}
	return walVersion(buf[:walHeaderSize]), true
}

// readMapped copies both copies of the header from the mapping, first the first and then the
// second, in the order SQLite's readers read them (a writer writes the second first). Each
// word is an atomic load, so no later load is done before an earlier one on any processor. It
// reports false if there is no mapping or reading it faulted.
func (w *walIndex) readMapped(buf *[2 * walHeaderSize]byte) (ok bool) {
	if len(w.mem) < len(buf) || w.faulted.Load() {
		return false
	}
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if recover() != nil {
			w.faulted.Store(true)
			ok = false
		}
	}()
	for i := 0; i < len(buf); i += 4 {
		word := atomic.LoadUint32((*uint32)(unsafe.Pointer(&w.mem[i])))
		binary.NativeEndian.PutUint32(buf[i:], word)
	}
	return true
}
