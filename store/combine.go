package store

import (
	"context"
	"database/sql"
	"errors"
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
// Each request's answer is what its own query would have read: the combined query starts after
// every member arrived, and each member's row depends on its own selector, id and kind only.
// A query answers for several requests, so its failure is nobody's answer in particular: when a
// combined query fails as a whole (an outage, a value PostgreSQL refuses), each of its requests
// asks again alone, with its own query on its own context, and gets that query's answer. So no
// request can fail another.
//
// A connection that stops answering (a frozen host, a half-open TCP connection) must not stop
// every request behind the lookup goroutines either. A request waits for a lookup goroutine
// and its answer at most combinePatience, far longer than a combined query takes; then it runs
// its own query, as it would without combining, and so do the requests after it until a lookup
// goroutine finishes a query again. A stuck goroutine waits out its query's deadline: the latest
// deadline of the requests it answers.

const (
	// combineWorkers is how many combined queries may run at once. Two let one query run in the
	// database while the answers of the last one are handed out.
	combineWorkers = 2
	// combineMax is the most lookups of one query.
	combineMax = 64
	// combinePatience is about how long a request waits for the combiner before it asks alone:
	// between half of it and all of it.
	combinePatience = time.Second
	// combineTimeout bounds a combined query for requests without a deadline (the server gives
	// every request one, which bounds the query instead).
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
	// deadline is the request's, if it has one: a combined query runs until the latest of its
	// members'.
	deadline time.Time
	// Results: the key (err is sql.ErrNoRows when there is none), and the object's columns (NULL
	// when there is no such object).
	k      keyRow
	doc    []byte
	parent sql.NullString
	err    error
	// failed is set when the query failed as a whole: err is its error, nobody's answer.
	failed bool
	done   chan struct{}
}

// combiner runs lookups for the store; see above.
type combiner struct {
	// rd and q are all of the store the lookups need: its readers and its queries.
	rd    *reader
	q     *queries
	queue chan *lookup
	stop  chan struct{}
	once  sync.Once
	// queries and lookups count what the goroutines ran, and aloneCount the lookups requests
	// ran on their own queries instead, for LookupStats.
	queries, lookups, aloneCount atomic.Uint64
	// patience is the channel a request waits on for its patience to run out (see clock).
	patience atomic.Pointer[chan struct{}]
	// stuck is set when a request ran out of patience, and cleared when a lookup goroutine
	// finishes a query: meanwhile a request is combined only if a lookup goroutine is free at
	// that moment, and otherwise asks alone at once instead of waiting out its patience first.
	stuck atomic.Bool
}

func newCombiner(rd *reader, q *queries) *combiner {
	c := &combiner{rd: rd, q: q, queue: make(chan *lookup), stop: make(chan struct{})}
	first := make(chan struct{})
	c.patience.Store(&first)
	go c.clock()
	for range combineWorkers {
		go c.loop()
	}
	return c
}

// clock runs out the requests' patience without a timer per request: every half
// combinePatience it closes the channel it handed out the time before last, so a request that
// took the current channel (c.patience) sees it closed between one half and one whole
// combinePatience later.
func (c *combiner) clock() {
	tick := time.NewTicker(combinePatience / 2)
	defer tick.Stop()
	prev := make(chan struct{})
	for {
		select {
		case <-tick.C:
			close(prev)
			next := make(chan struct{})
			prev = *c.patience.Swap(&next)
		case <-c.stop:
			return
		}
	}
}

func (c *combiner) close() {
	if c != nil {
		c.once.Do(func() { close(c.stop) })
	}
}

// do looks up the key with selector, and the object with id and kind when id is set, combined
// with the lookups of other requests waiting at the same time. The lookup it returns is the
// caller's to read; an error is ctx's or the closed store's.
func (c *combiner) do(ctx context.Context, selector, id, kind string) (*lookup, error) {
	l := &lookup{selector: selector, id: id, kind: kind, done: make(chan struct{})}
	l.deadline, _ = ctx.Deadline()
	patience := *c.patience.Load()
	if c.stuck.Load() {
		// Only a lookup goroutine that is free right now may take it. (One is when the flag
		// was set just after the last busy one finished; taking the lookup clears it.)
		select {
		case c.queue <- l:
		default:
			return c.alone(ctx, l)
		}
	} else {
		select {
		case c.queue <- l:
		case <-patience:
			c.stuck.Store(true) // the lookup goroutines are all stuck
			return c.alone(ctx, l)
		case <-c.stop:
			return nil, errStoreClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// From here on l belongs to a lookup goroutine until done is closed; a request that stops
	// waiting earlier never reads it again.
	select {
	case <-l.done:
		if l.failed {
			return c.alone(ctx, l)
		}
		return l, nil
	case <-patience:
		c.stuck.Store(true)
		return c.alone(ctx, l)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// alone looks up what l asks with the single-row query on the request's own context, into a
// lookup of its own (l may still be written by a lookup goroutine).
func (c *combiner) alone(ctx context.Context, l *lookup) (*lookup, error) {
	select {
	case <-c.stop:
		return nil, errStoreClosed
	default:
	}
	c.aloneCount.Add(1)
	own := &lookup{selector: l.selector, id: l.id, kind: l.kind}
	c.single(ctx, own)
	return own, nil
}

// single runs the single-row query of l.
func (c *combiner) single(ctx context.Context, l *lookup) {
	dest := l.k.dest()
	if l.id == "" {
		l.err = c.rd.QueryRowContext(ctx, c.q.auth, l.selector, ep.APIKeys.Kind).Scan(dest...)
	} else {
		l.err = c.rd.QueryRowContext(ctx, c.q.authGet, l.id, l.kind, l.selector, ep.APIKeys.Kind).
			Scan(append(dest, &l.doc, &l.parent)...)
	}
}

func (c *combiner) loop() {
	batch := make([]*lookup, 0, combineMax)
	for {
		var ok bool
		if batch, ok = gather(batch, c.queue, c.stop, combineMax, false); !ok {
			return
		}
		c.queries.Add(1)
		c.lookups.Add(uint64(len(batch)))
		c.run(batch)
		c.stuck.Store(false)
		for _, l := range batch {
			close(l.done)
		}
		clear(batch)
	}
}

// run reads the keys and objects of batch and fills in each lookup's results, or marks them all
// failed.
func (c *combiner) run(batch []*lookup) {
	ctx, cancel := context.WithDeadline(context.Background(), batchDeadline(batch))
	defer cancel()
	if len(batch) == 1 {
		l := batch[0]
		c.single(ctx, l)
		l.failed = l.err != nil && !errors.Is(l.err, sql.ErrNoRows)
		return
	}
	sels, ids, kinds := make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch))
	for i, l := range batch {
		sels[i], ids[i], kinds[i] = l.selector, l.id, l.kind
		l.err = sql.ErrNoRows // until its row arrives
	}
	rows, err := c.rd.QueryContext(ctx, authMany, sels, ids, kinds, ep.APIKeys.Kind)
	if err == nil {
		err = c.scan(rows, batch)
	}
	if err != nil {
		for _, l := range batch {
			l.k, l.doc, l.parent, l.err, l.failed = keyRow{}, nil, sql.NullString{}, err, true
		}
	}
}

// batchDeadline is the latest deadline of the batch's requests, or combineTimeout from now when
// one of them has none.
func batchDeadline(batch []*lookup) time.Time {
	var latest time.Time
	for _, l := range batch {
		if l.deadline.IsZero() {
			return time.Now().Add(combineTimeout)
		}
		if l.deadline.After(latest) {
			latest = l.deadline
		}
	}
	return latest
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
// into: Lookups / Queries is the average number of requests one query answered. Alone counts the
// lookups requests ran on queries of their own after the query they were in failed or the lookup
// goroutines were stuck: on a healthy database it stays near zero, and its growth is the sign of
// queries that fail or connections that stall. All are zero on SQLite.
type LookupStats struct {
	Queries, Lookups, Alone uint64
}

// LookupStats returns the combined lookup counters since the store opened.
func (s *Store) LookupStats() LookupStats {
	if s.combine == nil {
		return LookupStats{}
	}
	return LookupStats{Queries: s.combine.queries.Load(), Lookups: s.combine.lookups.Load(), Alone: s.combine.aloneCount.Load()}
}
