package serving

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// hold keeps n MiB live until it is released.
type hold struct{ blocks [][]byte }

func holdMiB(n int) *hold {
	h := &hold{}
	for range n {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page, so it is resident like a server's data
		}
		h.blocks = append(h.blocks, b)
	}
	return h
}

func restoreGC(t *testing.T) {
	t.Cleanup(func() {
		limitFloor.Store(0)
		debug.SetMemoryLimit(math.MaxInt64)
		debug.SetGCPercent(100)
	})
}

// The limit rises above what is live, by an eighth, and returns to its floor when that is freed.
func TestMemoryLimitFollowsWhatIsLive(t *testing.T) {
	restoreGC(t)
	runtime.GC()
	if got := tuneMemoryLimit(); got != DefaultMemoryLimit {
		t.Fatalf("limit with a small live heap = %d MiB, want the floor %d MiB", got>>20, DefaultMemoryLimit>>20)
	}
	h := holdMiB(200)
	runtime.GC()
	got := tuneMemoryLimit()
	if lo, hi := int64(225<<20), int64(270<<20); got < lo || got > hi {
		t.Errorf("limit with 200 MiB live = %d MiB, want 225–270 MiB (live plus an eighth)", got>>20)
	}
	if now := debug.SetMemoryLimit(-1); now != got {
		t.Errorf("the runtime's limit is %d, the tuner said %d", now, got)
	}
	runtime.KeepAlive(h)
	h = nil
	runtime.GC()
	runtime.GC()
	if got := tuneMemoryLimit(); got != DefaultMemoryLimit {
		t.Errorf("limit after the 200 MiB were freed = %d MiB, want the floor %d MiB", got>>20, DefaultMemoryLimit>>20)
	}
}

// With more live than the floor, the collector does not run back to back: allocating 64 MiB of
// garbage in small pieces over 150 MiB of live data takes a handful of collections. With the fixed
// 88 MiB limit this replaced, it took one per few allocations (hundreds).
func TestCollectorDoesNotThrashAboveTheFloor(t *testing.T) {
	restoreGC(t)
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	SetGC(0)
	h := holdMiB(150)
	runtime.GC()
	deadline := time.Now().Add(20 * time.Second)
	for debug.SetMemoryLimit(-1) < 150<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the limit stayed at %d MiB after a collection with 150 MiB live", debug.SetMemoryLimit(-1)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var sink []byte
	for range (64 << 20) / 4096 {
		sink = make([]byte, 4096)
	}
	_ = sink
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(h)
	if n := after.NumGC - before.NumGC; n > 10 {
		t.Errorf("%d collections while 64 MiB of garbage was allocated over 150 MiB live; want at most 10", n)
	}
}

// The operator's floor (serve --memory-limit) replaces DefaultMemoryLimit as the least limit, and
// what is live still raises the limit above it.
func TestMemoryLimitFloorIsTheOperators(t *testing.T) {
	restoreGC(t)
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	SetGC(48 << 20)
	runtime.GC()
	if got := tuneMemoryLimit(); got != 48<<20 {
		t.Fatalf("limit with a small live heap = %d MiB, want the operator's floor 48 MiB", got>>20)
	}
	h := holdMiB(100)
	runtime.GC()
	if got := tuneMemoryLimit(); got < 112<<20 {
		t.Errorf("limit with 100 MiB live = %d MiB, want at least live plus an eighth", got>>20)
	}
	runtime.KeepAlive(h)
	SetGC(0)
	runtime.GC()
	if got := tuneMemoryLimit(); got != DefaultMemoryLimit {
		t.Errorf("limit after SetGC(0) = %d MiB, want the default floor %d MiB", got>>20, DefaultMemoryLimit>>20)
	}
}
