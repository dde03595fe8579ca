//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package store

import (
	"os"
	"syscall"
)

// mapFirstPage maps the first page of f read-only and shared, or returns nil if it cannot.
func mapFirstPage(f *os.File) []byte {
	mem, err := syscall.Mmap(int(f.Fd()), 0, os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return mem
}

func unmapPage(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
