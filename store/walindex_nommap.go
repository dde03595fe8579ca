//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

import "os"

// mapFirstPage maps nothing here: the wal-index header is read with pread.
func mapFirstPage(*os.File) []byte { return nil }

func unmapPage([]byte) {}
