package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// WarmPool opens the connections of a PostgreSQL pool (up to its size, Options.MaxConns) at
// once and leaves them idle in the pool, and reports how many it opened. A process about to
// take agents (a handover's successor, a replica replacing a drained one) gets all its agents
// within moments, and each of their first writes would otherwise wait for a connection to be
// opened (a new PostgreSQL backend) on the agent's path, while the others' transactions hold the
// few open ones. A connection that cannot be opened is the caller's to log, not fatal: the pool
// opens connections on demand as before. SQLite has no pool to warm: it opens nothing.
func (s *Store) WarmPool(ctx context.Context) (int, error) {
	if s.pool <= 1 {
		return 0, nil
	}
	conns := make([]*sql.Conn, s.pool)
	errs := make([]error, s.pool)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.w.Conn(ctx)
			if err == nil {
				err = c.PingContext(ctx)
			}
			conns[i], errs[i] = c, err
		}()
	}
	wg.Wait()
	opened := 0
	for _, c := range conns {
		if c != nil {
			opened++
			c.Close() // back to the pool, idle: SetMaxIdleConns keeps the pool's size
		}
	}
	return opened, s.classify(errors.Join(errs...))
}
