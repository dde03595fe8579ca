package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

type sqliteDialect struct{}

func (sqliteDialect) name() string           { return "sqlite" }
func (sqliteDialect) remote() bool           { return false }
func (sqliteDialect) rebind(q string) string { return q }

func (sqliteDialect) uniqueViolation(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && (e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE)
}

// transient is never true: writers are serialised, so there are no deadlocks to retry.
func (sqliteDialect) transient(error) bool { return false }

func (sqliteDialect) fkViolation(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// unavailable: the file cannot be opened, or another process has held the write lock for longer
// than the busy timeout.
func (sqliteDialect) unavailable(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// ddl drops the explicit "C" collation of id columns, which PostgreSQL needs so that ids sort
// bytewise whatever the database's locale; SQLite compares text bytewise already.
func (sqliteDialect) ddl(stmt string) string { return strings.ReplaceAll(stmt, ` COLLATE "C"`, "") }

func (sqliteDialect) forShare() string       { return "" }
func (sqliteDialect) forUpdate() string      { return "" }
func (sqliteDialect) serialLock() string     { return "" }
func (sqliteDialect) nameLock() string       { return "" }
func (sqliteDialect) nameLockShared() string { return "" }

// lockMigrations needs no lock: the writer's transactions take the database lock at BEGIN.
func (sqliteDialect) lockMigrations(context.Context, *sql.Conn) (func(), error) {
	return func() {}, nil
}

// sqlitePragmas are set on every connection, in this order: a busy timeout first, so that another
// process writing (edgeplane apikey create while a server runs) or opening the same new file makes
// this one wait instead of fail; WAL, so readers never block the writer; foreign keys, for the
// cascades the schema declares. Then the durability's synchronous setting: under NORMAL a
// committed transaction survives a crash of the process (not necessarily a power loss or an
// operating system crash); under FULL every commit waits for an fsync of the WAL and survives a
// power loss too.
var sqlitePragmas = []string{"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)"}

func sqliteDSN(path string, d Durability, extra url.Values) string {
	v := url.Values{}
	for _, p := range sqlitePragmas {
		v.Add("_pragma", p)
	}
	if d == DurabilityFull {
		v.Add("_pragma", "synchronous(FULL)")
	} else {
		v.Add("_pragma", "synchronous(NORMAL)")
	}
	for k, vs := range extra {
		v[k] = append(v[k], vs...)
	}
	return "file:" + path + "?" + v.Encode()
}

// ErrNoDatabase is returned by OpenWith with Options.MustExist when the SQLite database file
// does not exist.
var ErrNoDatabase = errors.New("no such database")

// checkSQLitePath reports a path that cannot be a database before anything is created: an empty
// one, one whose directory does not exist, and, when mustExist is set, a file that does not exist.
func checkSQLitePath(path string, mustExist bool) error {
	if path == "" {
		return errors.New("store: empty SQLite path")
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: the directory %s of the database %s does not exist; create it, or check the database path", dir, path)
	} else if err != nil {
		return fmt.Errorf("store: directory of the database %s: %w", path, err)
	} else if !st.IsDir() {
		return fmt.Errorf("store: %s, the directory of the database %s, is not a directory", dir, path)
	}
	if !mustExist {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %s: %w; check the database path (only edgeplane serve and import create a database)", path, ErrNoDatabase)
	} else if err != nil {
		return fmt.Errorf("store: database %s: %w", path, err)
	}
	return nil
}

// openSQLite opens the database file at path with one writer connection, whose transactions
// take the write lock at BEGIN (no lock upgrades that could fail under concurrency), and a pool
// of read-only connections.
func openSQLite(path string, d Durability) (*Store, error) {
	if err := checkSQLitePath(path, false); err != nil {
		return nil, err
	}
	w, openErr := sql.Open("sqlite", sqliteDSN(path, d, url.Values{"_txlock": {"immediate"}}))
	if openErr != nil {
		return nil, openErr
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	// Switching a new file to WAL can fail with SQLITE_BUSY without waiting on the busy handler
	// when another process opens the same new file at the same moment: retry, bounded.
	var err error
	for delay, waited := 5*time.Millisecond, time.Duration(0); ; delay *= 2 {
		if err = w.Ping(); err == nil || !(sqliteDialect{}).unavailable(err) || waited > 10*time.Second {
			break
		}
		time.Sleep(delay)
		waited += delay
	}
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	readDSN := sqliteDSN(path, d, url.Values{"_pragma": {"query_only(1)"}})
	r, err := sql.Open("sqlite", readDSN)
	if err != nil {
		w.Close()
		return nil, err
	}
	n := max(4, 2*runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	return &Store{d: sqliteDialect{}, w: w, r: r, sqlitePath: path, readDSN: readDSN}, nil
}
