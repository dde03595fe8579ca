package main

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	"github.com/edgeplane/edgeplane/store"
)

// newDatabaseFiles lists the files that opening dsn will create and a failed import must remove,
// so that it leaves nothing behind: for a SQLite database that does not exist yet, the database,
// its WAL and shared-memory files, and its key file when there is none yet. A stale key file left
// by a refused import would otherwise be taken for the database's key by the next attempt. For an
// existing database, and for PostgreSQL, it is empty.
func newDatabaseFiles(dsn string) []string {
	if store.IsPostgres(dsn) {
		return nil
	}
	path := strings.TrimPrefix(dsn, "sqlite:")
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	files := []string{path, path + "-wal", path + "-shm"}
	if _, err := os.Stat(path + ".key"); errors.Is(err, fs.ErrNotExist) {
		files = append(files, path+".key")
	}
	return files
}

// removeFiles removes the files, ignoring those that do not exist.
func removeFiles(files []string) {
	for _, f := range files {
		_ = os.Remove(f)
	}
}
