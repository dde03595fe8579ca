// Package benchcpu reports CPU time per benchmark operation, which on a shared, noisy machine is
// steadier than wall time.
package benchcpu

import (
	"syscall"
	"testing"
	"time"
)

// PerOp reports the CPU time (user and system, all threads) the process spends per operation as
// "cpu-ns/op". Call it right before the measured loop.
func PerOp(b *testing.B) {
	start := cpuTime()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	})
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
