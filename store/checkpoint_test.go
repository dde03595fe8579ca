package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// writePages commits n transactions through the committer, each adding rows pages of data (a
// 4,000-byte value per row, one page each), and calls each with the WAL's length after every
// transaction.
func writePages(t *testing.T, s *Store, n, rows int, each func(frames uint32)) {
	t.Helper()
	ctx := context.Background()
	if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS pages (v TEXT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("x", 4000)
	for i := 0; i < n; i++ {
		if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			for j := 0; j < rows; j++ {
				if _, err := tx.ExecContext(ctx, `INSERT INTO pages (v) VALUES (?)`, value); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		h, ok := s.ckpt.shm.header()
		if !ok {
			t.Fatal("no wal-index header")
		}
		each(h.frames())
	}
}

// The checkpointer syncs the WAL every syncPages and copies it back once it has grown by
// checkpointPages, on its own connection: the committer's automatic checkpoint is set to the much
// larger backstop, so without the checkpointer nothing would be copied this early, and nothing
// synced under synchronous=NORMAL.
func TestCheckpointerCopiesTheWAL(t *testing.T) {
	s := openCommitTest(t)
	if s.ckpt == nil {
		t.Fatal("no checkpointer")
	}
	var auto int
	if err := s.commit.conn.QueryRowContext(context.Background(), `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != backstopPages {
		t.Fatalf("the committer's automatic checkpoint is at %d pages, want %d", auto, backstopPages)
	}
	wait := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	writePages(t, s, 25, 100, func(uint32) {}) // ~2,500 pages
	wait("the WAL was not synced after 2,500 pages", func() bool { return s.ckpt.syncs.Load() >= 2 })
	if n := s.ckpt.runs.Load(); n != 0 {
		t.Errorf("%d checkpoints before %d pages of WAL", n, checkpointPages)
	}
	writePages(t, s, 20, 100, func(uint32) {}) // ~4,500 pages
	wait("no checkpoint after 4,500 pages of WAL", func() bool { return s.ckpt.runs.Load() > 0 })
}

// Under writes that never pause, the WAL still starts over (through the committer's backstop,
// after the checkpointer has copied nearly everything) instead of growing without bound.
func TestCheckpointsBoundTheWAL(t *testing.T) {
	s := openCommitTest(t)
	var most, restarts uint32
	last := uint32(0)
	writePages(t, s, 600, 100, func(frames uint32) { // ~60,000 pages
		most = max(most, frames)
		if frames < last {
			restarts++
		}
		last = frames
	})
	// The committer's checkpoint at the backstop may find the checkpoint lock taken (by the
	// checkpointer's last round) and try again at later commits; the WAL must still start over
	// soon after the backstop. "Soon" is loose: when other tests load the machine, the
	// checkpointer's last round can hold the lock for thousands of commits' worth of pages.
	// Measured under four busy loops on two cores: at most ~21,000 pages, three restarts or more.
	if most > 4*backstopPages || restarts == 0 {
		t.Fatalf("WAL reached %d pages and started over %d times in ~60,000; want at most %d pages and a restart", most, restarts, 4*backstopPages)
	}
	t.Logf("WAL at most %d pages, %d restarts, %d background checkpoints", most, restarts, s.ckpt.runs.Load())
}
