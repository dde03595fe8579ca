package serving

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultGCPercent is the garbage collector target of a server unless GOGC is set. The server's
// live heap is a few megabytes, so Go's default of 100 collected dozens of times a second under
// load; 400 took about a tenth off the CPU of a create for some 20 MB more memory (measured with
// edgeplane-bench; docs/decisions.md, "The request log and the garbage collector").
const DefaultGCPercent = 400

// DefaultMemoryLimit is the floor of the garbage collector's soft memory limit unless GOMEMLIMIT
// is set or the operator gives another (serve --memory-limit). With DefaultGCPercent alone the
// heap may grow to five times what is live: harmless for the few megabytes of a usual server,
// but the read cache (64 MiB) and the answers being rendered (see server.DefaultResponseBytes)
// of a hostile account are far more, and five times them is gigabytes. Near the limit the collector runs as often as it must, so the process stays within
// the performance target (150 MB resident) while what is live fits.
const DefaultMemoryLimit = 88 << 20

// liveHeadroom is the share of the live memory the limit leaves above it once what is live no
// longer fits under DefaultMemoryLimit (see tuneMemoryLimit): an eighth, so that the collector
// runs about once per eighth of the live heap allocated, like GOGC=12. A quarter took a hostile
// account's process (read cache, snapshot cache and answers being rendered, ~105 MiB live) to
// 145-158 MiB resident, over the 150 MB target (cmd/edgeplane TestHostileAccountRSS); an eighth
// keeps it at about 130 MiB.
const liveHeadroom = 8

// minHeadroom is the least room above what is live, so that a server just past the floor does
// not collect after every few allocations.
const minHeadroom = 8 << 20

// SetGC applies DefaultGCPercent unless the GOGC environment variable says otherwise, and unless
// GOMEMLIMIT does, a soft memory limit that follows what is live: floor (DefaultMemoryLimit unless
// the operator says otherwise), or what was live after the last collection plus an eighth,
// whichever is more. A floor that is not positive is DefaultMemoryLimit.
//
// A fixed limit below what is live makes the collector run back to back (it is then held to half
// the CPU): 10,000 idle agent sessions hold several hundred megabytes, and an account with
// 100,000 routes about 140 MB, so a fixed 88 MiB limit made such a server spend a fifth of a core
// at rest and slowed every plan rebuild. Following the live memory keeps the limit's bound on
// garbage (an eighth of what is live, against four times with GOGC=400 alone)
// without that cost.
func SetGC(floor int64) {
	if floor <= 0 {
		floor = DefaultMemoryLimit
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limitFloor.Store(floor)
		debug.SetMemoryLimit(floor)
		tunerOnce.Do(func() { armTuner(&tunerArmed{}) })
	}
}

var tunerOnce sync.Once

// limitFloor is the floor SetGC was given; 0 until then, which is DefaultMemoryLimit. It is a
// package variable because what it tunes, the runtime's memory limit, is one per process.
var limitFloor atomic.Int64

// floor is the limit's floor now.
func floor() int64 {
	if f := limitFloor.Load(); f > 0 {
		return f
	}
	return DefaultMemoryLimit
}

// tunerArmed is the object whose collection tells the tuner a garbage collection has happened:
// it is dropped as soon as it is made, so every cycle finds it unreachable and runs its cleanup,
// which sets the limit and arms a new one. It is larger than the runtime's tiny-object size, so
// that it has a cleanup of its own.
type tunerArmed struct{ _ [32]byte }

func armTuner(p *tunerArmed) {
	runtime.AddCleanup(p, func(struct{}) {
		tuneMemoryLimit()
		armTuner(&tunerArmed{})
	}, struct{}{})
}

// memSamples are the runtime/metrics the tuner reads after each collection.
var memSamples = []metrics.Sample{
	{Name: "/gc/heap/live:bytes"},
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
}

var tuneMu sync.Mutex

// tuneMemoryLimit sets the soft memory limit to what is live plus its headroom, and never below
// the floor. What is live is the heap marked by the last collection plus the memory that
// is not heap objects (goroutine stacks, the runtime's metadata), which the limit also counts.
// It returns the limit set.
func tuneMemoryLimit() int64 {
	tuneMu.Lock()
	defer tuneMu.Unlock()
	metrics.Read(memSamples)
	v := func(i int) int64 {
		if memSamples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(memSamples[i].Value.Uint64())
	}
	heapLive := v(0)
	mapped := v(1) - v(2)
	notObjects := mapped - v(3) - v(4) - v(5)
	live := heapLive + max(notObjects, 0)
	limit := max(floor(), live+max(live/liveHeadroom, minHeadroom))
	debug.SetMemoryLimit(limit)
	return limit
}
