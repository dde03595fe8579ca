// Package memtest holds what the memory tests of the data plane share: the live heap after
// collection, and traffic policy documents of a chosen size, so that the planner's, the
// enforcer's and the server's tests measure the same way and on the same documents.
package memtest

import (
	"fmt"
	"runtime"
	"strings"
)

// LiveHeap returns the bytes of heap still reachable: two collections first, so that what a
// finalizer freed in the first is gone too.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Fill returns head followed by part(0), part(1), … as long as the document stays within size
// bytes.
func Fill(head string, size int, part func(j int) string) string {
	var b strings.Builder
	b.WriteString(head)
	for j := 0; ; j++ {
		p := part(j)
		if b.Len()+len(p) > size {
			return b.String()
		}
		b.WriteString(p)
	}
}

// DenseConnPolicy is an on_tcp_connect document of about size bytes made of rules with one CEL
// expression each, distinct per seed: the shape that compiles to the most memory per byte (at
// 64 KiB, some 1.2 MiB of a routing plan).
func DenseConnPolicy(seed, size int) string {
	return Fill("on_tcp_connect:\n", size, func(j int) string {
		return fmt.Sprintf("  - expressions: [\"conn.client_port == %d && conn.server_port != %d\"]\n    actions: [{type: deny}]\n", seed*10000+j, j)
	})
}
