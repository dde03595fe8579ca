package main

import (
	"os"
	"syscall"
	"unsafe"
)

// isatty asks the kernel for f's terminal attributes, which only a terminal has.
func isatty(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
