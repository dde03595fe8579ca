package store

// The read cache's bound in bytes.
//
// Counting entries alone does not bound the cache's memory: objects are as large as the limits on
// what one object may hold let them be (a traffic policy of 64 KiB, a route of 128 KiB), and
// 16,384 entries of such objects are gigabytes (once, 600 TLS edges with a 1 MB traffic
// policy each took the process to 2.2 GB). Each entry is therefore counted as the bytes it holds
// — its document, the room reserved for the body the server renders from it (Rendered keeps no
// larger body) and a fixed overhead for the map entry and its strings — and the cache evicts
// entries to stay within its budget.

// DefaultReadCacheBytes is the read cache's budget: what its entries are counted as (documents,
// rendered bodies, overhead) stays at or under it. 64 MiB holds the 16,384 objects of the entry
// bound when they are of ordinary size (up to a KiB or so), and about 170 of the largest objects
// the limits allow (routes of 128 KiB, each with room for a rendered body twice its size).
const DefaultReadCacheBytes = 64 << 20

// entryOverhead is what one entry is counted as beyond the bytes of its strings: the map's slot,
// the struct and the slice and string headers.
const entryOverhead = 256

// renderLimit is the largest rendered body kept for a document of doc bytes: the rendering adds
// uris (the object's and those of the objects it refers to) to the stored fields.
func renderLimit(doc int) int { return 2*doc + 1024 }

// cost is what the entry is counted as against the budget.
func (o *cachedObject) cost(id string) int64 {
	n := entryOverhead + len(id) + len(o.account) + len(o.kind) + len(o.parent.String) + len(o.doc)
	if o.rendered != nil {
		n += o.rendered.limit
	}
	return int64(n)
}

// keyCost is what a cached API key is counted as against the budget.
func keyCost(selector string, k keyRow) int64 {
	return int64(entryOverhead + len(selector) + len(k.hash) + len(k.digest) + len(k.c.AccountID) + len(k.c.KeyID) +
		len(k.c.Principal.ID) + len(k.role))
}

// makeRoom evicts objects until n more bytes fit in the budget, and reports whether they do. The
// objects evicted are whichever the map yields first, which is as good as any: the whole cache
// goes at the next change of the database anyway. The caller holds c.mu for writing.
func (c *readCache) makeRoom(n int64) bool {
	if n > c.budget {
		return false
	}
	for id := range c.objs {
		if c.bytes+n <= c.budget {
			break
		}
		c.dropObject(id)
	}
	return c.bytes+n <= c.budget
}

// addKey caches an API key, within the bounds. The caller holds c.mu for writing.
func (c *readCache) addKey(selector string, k keyRow) {
	if old, ok := c.keys[selector]; ok {
		c.bytes -= keyCost(selector, old)
		delete(c.keys, selector)
	}
	if n := keyCost(selector, k); len(c.keys) < maxCachedKeys && c.makeRoom(n) {
		if !k.decoded {
			k.decode()
		}
		c.keys[selector] = k
		c.bytes += n
	}
}

// addObject caches an object, within the bounds. The caller holds c.mu for writing.
func (c *readCache) addObject(id string, o cachedObject) {
	c.dropObject(id)
	if n := o.cost(id); len(c.objs) < maxCachedObjects && c.makeRoom(n) {
		c.objs[id] = o
		c.bytes += n
	}
}

// dropObject removes an object from the cache, if it is there. The caller holds c.mu for writing.
func (c *readCache) dropObject(id string) {
	if o, ok := c.objs[id]; ok {
		c.bytes -= o.cost(id)
		delete(c.objs, id)
	}
}

// clearObjects empties the cache of objects. The caller holds c.mu for writing.
func (c *readCache) clearObjects() {
	for id, o := range c.objs {
		c.bytes -= o.cost(id)
	}
	clear(c.objs)
}

// clearKeys empties the cache of API keys. The caller holds c.mu for writing.
func (c *readCache) clearKeys() {
	for s, k := range c.keys {
		c.bytes -= keyCost(s, k)
	}
	clear(c.keys)
}

// setBudget changes the budget, evicting what no longer fits.
func (c *readCache) setBudget(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget = n
	c.makeRoom(0)
}
