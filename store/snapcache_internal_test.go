package store

import (
	"testing"
	"time"
)

// The snapshot cache's bounds: an account idle for longer than snapCacheIdle is dropped, the
// least recently snapshotted accounts make room for a new one, an account larger than the whole
// budget is never kept, and a reset discards what a snapshot begun before it would put back.
func TestSnapCacheBounds(t *testing.T) {
	c := &snapCache{budget: 100}
	now := time.Now()
	acct := func(bytes int64, used time.Time) *snapAccount {
		return &snapAccount{kinds: map[string]map[string]snapEntry{}, bytes: bytes, used: used}
	}
	put := func(name string, bytes int64, used time.Time) {
		_, gen := c.take(name, used)
		c.put(name, acct(bytes, used), gen)
	}
	held := func(name string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.accounts[name] != nil
	}
	put("a", 40, now)
	put("b", 40, now.Add(time.Second))
	put("c", 40, now.Add(2*time.Second)) // a, the oldest, makes room
	if held("a") || !held("b") || !held("c") || c.bytes != 80 {
		t.Fatalf("after c: a %v b %v c %v, %d bytes", held("a"), held("b"), held("c"), c.bytes)
	}
	put("huge", 101, now.Add(3*time.Second))
	if held("huge") || !held("b") || c.bytes != 80 {
		t.Fatalf("an account over the budget was kept or evicted others: %d bytes", c.bytes)
	}
	// Taking an account hands it over: the cache no longer counts it.
	if e, _ := c.take("b", now.Add(4*time.Second)); e == nil || held("b") || c.bytes != 40 {
		t.Fatalf("take: %v, held %v, %d bytes", e, held("b"), c.bytes)
	}
	// c not snapshotted for longer than snapCacheIdle goes at the next snapshot of any account.
	if e, _ := c.take("x", now.Add(2*time.Second+snapCacheIdle+time.Second)); e != nil || held("c") || c.bytes != 0 {
		t.Fatalf("idle account kept: held %v, %d bytes", held("c"), c.bytes)
	}
	// A snapshot begun before a reset puts nothing back.
	_, gen := c.take("d", now)
	c.reset()
	c.put("d", acct(10, now), gen)
	if held("d") || c.bytes != 0 {
		t.Fatal("a snapshot begun before a reset was kept")
	}
}
