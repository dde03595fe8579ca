package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// Combined key lookups (PostgreSQL).
//
// Every API request authenticates its key, and a GET by id reads its object in the same query
// (AuthenticateGet). On PostgreSQL each such query is a round trip to a backend process: a write
// and a read on the socket here, a wake-up, parse, bind and execute there. With the database on
// the same small machine as the server, that fixed cost per query, not the lookup itself, is
// what limits the rate: PostgreSQL answers about five times as many primary-key rows per second
// when it is asked for eight at a time as when it is asked for one.
//
// So the lookups of concurrent requests are combined. A request hands its lookup to one of a
// few lookup goroutines; a goroutine takes the lookup it is given and every other one waiting at
// that moment, and asks for all of them in one query that joins the requests (an unnest of
// arrays) to the keys and objects. Nobody waits on purpose: a lone request is looked up at once
// (with the single-row query), and a busy server looks up more requests per query.
//
// Each request's answer is exactly what its own query would have read: the combined query runs
// after every member arrived, and each member's row depends on its own selector and id only.
// A member whose request ends while it waits is answered with its context's error, and its row,
// if read, is dropped.

const (
	// combineWorkers is how many combined queries may run at once. Two let one query run in the
	// database while the answers of the last one are handed out.
	combineWorkers = 2
	// combineMax is the most lookups of one query.
	combineMax = 64
	// combineTimeout bounds a combined query, which runs on behalf of several requests and so
	// without any one request's cancellation.
	combineTimeout = 10 * time.Second
)

// authMany is the combined query: one row per member whose key exists, numbered by the
// member's place in the arrays ($1 selectors, $2 object ids, $3 object kinds; $4 the kind of API
// keys), with NULL object columns where the account has no such object or no object was asked
// for (an empty id).
const authMany = `SELECT r.n, t.hash, t.account_id, t.object_id, p.id, p.role, p.active, o.doc, o.parent_id
	FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(sel, oid, okind, n)
	JOIN tokens t ON t.selector = r.sel AND t.kind = $4
	JOIN principals p ON p.id = t.principal_id
	LEFT JOIN objects o ON o.id = r.oid AND o.account_id = t.account_id AND o.kind = r.okind`

// lookup is one authentication, with the read of one object when id is set.
type lookup struct {
	selector, id, kind string
	// Results: the key, and the object's columns (NULL when there is no such object).
	k      keyRow
	doc    []byte
	parent sql.NullString
	err    error
	done   chan struct{}
}

// combiner runs lookups for the store; see above.
type combiner struct {
	s     *Store
	queue chan *lookup
	stop  chan struct{}
	once  sync.Once
	// queries and lookups count what the goroutines ran, for LookupStats.
	queries, lookups atomic.Uint64
}

func newCombiner(s *Store) *combiner {
	c := &combiner{s: s, queue: make(chan *lookup), stop: make(chan struct{})}
	for range combineWorkers {
		go c.loop()
	}
	return c
}

func (c *combiner) close() {
	if c != nil {
		c.once.Do(func() { close(c.stop) })
	}
}

// do looks l up, combined with the lookups of other requests waiting at the same time.
func (c *combiner) do(ctx context.Context, l *lookup) error {
	l.done = make(chan struct{})
	select {
	case c.queue <- l:
	case <-c.stop:
		return errStoreClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *combiner) loop() {
	batch := make([]*lookup, 0, combineMax)
	for {
		select {
		case l := <-c.queue:
			batch = append(batch[:0], l)
		case <-c.stop:
			return
		}
	gather:
		for len(batch) < combineMax {
			select {
			case l := <-c.queue:
				batch = append(batch, l)
			default:
				break gather
			}
		}
		c.queries.Add(1)
		c.lookups.Add(uint64(len(batch)))
		c.run(batch)
		for _, l := range batch {
			close(l.done)
		}
		clear(batch)
	}
}

// run reads the keys and objects of batch and fills in each lookup's results.
func (c *combiner) run(batch []*lookup) {
	ctx, cancel := context.WithTimeout(context.Background(), combineTimeout)
	defer cancel()
	if len(batch) == 1 {
		l := batch[0]
		dest := l.k.dest()
		if l.id == "" {
			l.err = c.s.rd.QueryRowContext(ctx, c.s.q.auth, l.selector, ep.APIKeys.Kind).Scan(dest...)
		} else {
			l.err = c.s.rd.QueryRowContext(ctx, c.s.q.authGet, l.id, l.kind, l.selector, ep.APIKeys.Kind).
				Scan(append(dest, &l.doc, &l.parent)...)
		}
		return
	}
	sels, ids, kinds := make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch))
	for i, l := range batch {
		sels[i], ids[i], kinds[i] = l.selector, l.id, l.kind
		l.err = sql.ErrNoRows // until its row arrives
	}
	rows, err := c.s.rd.QueryContext(ctx, authMany, sels, ids, kinds, ep.APIKeys.Kind)
	if err == nil {
		err = c.scan(rows, batch)
	}
	if err != nil {
		for _, l := range batch {
			l.k, l.doc, l.parent, l.err = keyRow{}, nil, sql.NullString{}, err
		}
	}
}

// scan hands each row of a combined query to the lookup it answers.
func (c *combiner) scan(rows *sql.Rows, batch []*lookup) error {
	defer rows.Close()
	var (
		n   int64
		k   keyRow
		doc []byte
		par sql.NullString
	)
	dest := append([]any{&n}, k.dest()...)
	dest = append(dest, &doc, &par)
	for rows.Next() {
		doc, par = nil, sql.NullString{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if n < 1 || n > int64(len(batch)) {
			return fmt.Errorf("store: combined lookup answered for member %d of %d", n, len(batch))
		}
		l := batch[n-1]
		l.k, l.doc, l.parent, l.err = k, doc, par, nil
	}
	return rows.Err()
}

// LookupStats counts the key lookups of a PostgreSQL store and the queries they were combined
// into: Lookups / Queries is the average number of requests one query answered. Both are zero on
// SQLite.
type LookupStats struct {
	Queries, Lookups uint64
}

// LookupStats returns the combined lookup counters since the store opened.
func (s *Store) LookupStats() LookupStats {
	if s.combine == nil {
		return LookupStats{}
	}
	return LookupStats{Queries: s.combine.queries.Load(), Lookups: s.combine.lookups.Load()}
}
