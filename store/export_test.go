package store

// SetReadCacheBudget sets the read cache's budget in bytes, for tests that fill it with fewer
// objects than the default budget takes.
func SetReadCacheBudget(s *Store, n int64) { s.cache.setBudget(n) }
