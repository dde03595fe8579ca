package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Checkpoints (SQLite).
//
// In WAL mode a commit appends the pages it changed to the WAL; a checkpoint copies them back
// into the database file, and once everything is copied the next write starts the WAL over. By
// default SQLite checkpoints inline: the commit that takes the WAL past 1,000 pages copies all of
// them and syncs both files before it returns. Every write of this server waits behind the
// committer, so that one commit held up all of them: at 16 concurrent creates, ~5 ms every
// ~40 ms, which was the p99 of creates, and an eighth of the committer's time.
//
// The checkpointer does that work on a connection of its own instead, beside the committer:
// after commits, it reads the WAL's length from the wal-index header and, once 1,000 pages have
// been added since its last checkpoint, runs a PASSIVE checkpoint, which copies what is in the
// WAL without taking the write lock, so commits go on meanwhile. The writer connection's own
// automatic checkpoint stays as a backstop at ten times that: a PASSIVE checkpoint running beside
// steady writes rarely finds the moment when the WAL is entirely copied, which is when the next
// write may start it over, so under sustained writes the WAL grows until the committer's own
// checkpoint (little left to copy by then) lets it restart. That bounds the WAL at ~40-45 MB.
//
// Durability is unchanged: a checkpoint syncs the WAL before it copies (under synchronous=NORMAL,
// the only sync of the WAL), and it still does so every 1,000 pages.

const (
	// checkpointPages is the WAL growth, in pages, after which the checkpointer copies it back:
	// SQLite's default automatic checkpoint.
	checkpointPages = 1000
	// backstopPages is the writer connection's own automatic checkpoint.
	backstopPages = 10 * checkpointPages
)

// frames is the header's mxFrame: the number of valid frames (pages) in the WAL.
func (v walVersion) frames() uint32 { return binary.NativeEndian.Uint32(v[16:20]) }

// checkpointer runs the checkpoints of a SQLite store.
type checkpointer struct {
	db   *sql.DB
	shm  *walIndex
	wake chan struct{} // one pending nudge is enough
	quit chan struct{}
	done chan struct{}
	// mark is the WAL length at the end of the last checkpoint (0 after the WAL started over).
	mark uint32
	// runs counts the checkpoints run, for tests.
	runs atomic.Uint64
}

// openWALIndex opens a connection of its own to the SQLite database at path (dsn), kept open
// for the store's life, and the database's wal-index (the -shm file) for reading its header. A
// read through the connection first opens the WAL and the wal-index.
func openWALIndex(ctx context.Context, path, dsn string) (*sql.DB, *walIndex, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		db.Close()
		return nil, nil, err
	}
	shm, err := openWALIndexFile(path)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, shm, nil
}

// openCheckpointer starts the checkpointer of the database at path; dsn opens its connection.
func openCheckpointer(ctx context.Context, path, dsn string) (*checkpointer, error) {
	db, shm, err := openWALIndex(ctx, path, dsn)
	if err != nil {
		return nil, fmt.Errorf("store: checkpointer: %w", err)
	}
	k := &checkpointer{db: db, shm: shm, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go k.loop()
	return k, nil
}

// nudge tells the checkpointer that a commit has added to the WAL. It never blocks.
func (k *checkpointer) nudge() {
	if k == nil {
		return
	}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *checkpointer) loop() {
	defer close(k.done)
	for {
		select {
		case <-k.wake:
		case <-k.quit:
			return
		}
		h, ok := k.shm.header()
		if !ok {
			continue // a commit is writing the header; it nudges again
		}
		n := h.frames()
		if n < k.mark {
			k.mark = 0 // the WAL started over
		}
		// One more round just short of the backstop, so that the committer's checkpoint, which
		// lets the WAL start over, finds little left to copy; and none after it until the WAL
		// has started over, so that this connection does not hold the checkpoint lock when the
		// committer's checkpoint tries to take it (it does not wait: it tries again at the next
		// commit, copying what it can each time, as SQLite does on its own).
		const last = backstopPages - checkpointPages/4
		if n >= last {
			if k.mark >= last {
				continue
			}
		} else if n-k.mark < checkpointPages {
			continue
		}
		var busy, log, done int64
		// PASSIVE: copy what can be copied without waiting for readers or the writer. Its errors
		// (an I/O error, which the writer meets too) leave the WAL to the writer's backstop.
		if err := k.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err == nil {
			k.mark = n
			k.runs.Add(1)
		}
	}
}

// close stops the checkpointer after the checkpoint in progress and closes its connection.
func (k *checkpointer) close() {
	if k == nil {
		return
	}
	close(k.quit)
	<-k.done
	k.shm.Close()
	k.db.Close()
}
