package enforce

import (
	"runtime"
	"sync"
	"weak"
)

// weakCache maps keys to values that live as long as some stage holds them: a value is made on
// a key's first use and shared by every later use while it is referenced, and its entry is
// removed once the garbage collector finds it unreferenced. A data plane's caches of providers'
// documents use it so that they survive plan rebuilds yet hold no more entries than the live
// plans name, however many an account's configurations have named over time.
type weakCache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]weak.Pointer[V]
}

func newWeakCache[K comparable, V any]() *weakCache[K, V] {
	return &weakCache[K, V]{m: map[K]weak.Pointer[V]{}}
}

// get returns the value of k, made with make when there is none or it was collected.
func (c *weakCache[K, V]) get(k K, make func() *V) *V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.m[k].Value(); v != nil {
		return v
	}
	v := make()
	wp := weak.Make(v)
	c.m[k] = wp
	runtime.AddCleanup(v, c.forget, weakEntry[K, V]{k, wp})
	return v
}

type weakEntry[K comparable, V any] struct {
	key K
	wp  weak.Pointer[V]
}

// forget removes an entry whose value was collected, unless it was made again since.
func (c *weakCache[K, V]) forget(e weakEntry[K, V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[e.key] == e.wp {
		delete(c.m, e.key)
	}
}

// len is the number of entries held, for the tests.
func (c *weakCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
