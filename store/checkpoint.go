package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
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
// after commits, it reads the WAL's length from the wal-index header and, once 4,000 pages have
// been added since its last checkpoint, runs a PASSIVE checkpoint, which copies what is in the
// WAL without taking the write lock, so commits go on meanwhile. Copying every 4,000 pages rather
// than SQLite's 1,000 copies a page that commits keep changing (the last page of the table and
// of each index, an index page every create touches) once where it was copied four times, and
// syncs the database file a quarter as often. The writer connection's own automatic checkpoint
// stays as a backstop at 10,000 pages: a PASSIVE checkpoint running beside steady writes rarely
// finds the moment when the WAL is entirely copied, which is when the next write may start it
// over, so under sustained writes the WAL grows until the committer's own checkpoint (little
// left to copy by then) lets it restart. That bounds the WAL at ~40-45 MB.
//
// Durability is unchanged: under synchronous=NORMAL the only sync of the WAL is the one a
// checkpoint makes before it copies, which SQLite's default makes every 1,000 pages. Between two
// checkpoints the checkpointer syncs the WAL itself every 1,000 pages (an fsync of the -wal
// file, which SQLite never locks, so opening and closing it leaves SQLite's locks alone), so a
// power loss can take back at most what it could before.

const (
	// syncPages is the WAL growth, in pages, after which the checkpointer syncs it: the cadence
	// of SQLite's default automatic checkpoint, which is what syncs the WAL under NORMAL.
	syncPages = 1000
	// checkpointPages is the WAL growth after which the checkpointer copies it back.
	checkpointPages = 4 * syncPages
	// backstopPages is the writer connection's own automatic checkpoint.
	backstopPages = 10 * syncPages
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
	// wal is the path of the WAL file, synced between checkpoints.
	wal string
	// mark is the WAL length at the end of the last checkpoint, synced the WAL length at its
	// last sync (each 0 after the WAL started over).
	mark, synced uint32
	// runs counts the checkpoints run and syncs the syncs between them, for tests.
	runs, syncs atomic.Uint64
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
	k := &checkpointer{db: db, shm: shm, wal: path + "-wal", wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
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
		if n < k.synced {
			k.synced = 0
		}
		if k.copyDue(n) {
			var busy, log, done int64
			// PASSIVE: copy what can be copied without waiting for readers or the writer. Its
			// errors (an I/O error, which the writer meets too) leave the WAL to the writer's
			// backstop.
			if err := k.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err == nil {
				k.mark = n
				k.runs.Add(1)
			}
		}
		// A checkpoint syncs the WAL only when it finds something to copy; the sync below,
		// of a file it has just synced, costs little and leaves nothing to that condition.
		if n-k.synced >= syncPages && k.syncWAL() == nil {
			k.synced = n
			k.syncs.Add(1)
		}
	}
}

// copyDue reports whether the checkpointer copies the WAL back at its length n.
func (k *checkpointer) copyDue(n uint32) bool {
	// One more round just short of the backstop, so that the committer's checkpoint, which lets
	// the WAL start over, finds little left to copy; and none after it until the WAL has started
	// over, so that this connection does not hold the checkpoint lock when the committer's
	// checkpoint tries to take it (it does not wait: it tries again at the next commit, copying
	// what it can each time, as SQLite does on its own).
	const last = backstopPages - syncPages/4
	if n >= last {
		return k.mark < last
	}
	return n-k.mark >= checkpointPages
}

// syncWAL syncs the WAL file to disk. It opens the file each time, so that it always syncs the
// file SQLite writes, whatever happened to an earlier one; for writing, because some systems
// (Windows) flush only a handle that may write. It writes nothing.
func (k *checkpointer) syncWAL() error {
	f, err := os.OpenFile(k.wal, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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
