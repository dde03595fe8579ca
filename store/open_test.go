package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Options.MustExist refuses a SQLite database that does not exist and creates nothing, neither
// the database nor its key file; without it the database and key file are created.
func TestOpenMustExist(t *testing.T) {
	t.Setenv(SecretKeyEnv, "")
	dir := t.TempDir()
	path := filepath.Join(dir, "typo.db")
	for _, dsn := range []string{path, "sqlite:" + path} {
		_, err := OpenWith(context.Background(), dsn, Options{MustExist: true})
		if !errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), path) {
			t.Fatalf("OpenWith(%q, MustExist): %v, want ErrNoDatabase naming the path", dsn, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("a refused open left %v behind", entries)
		}
	}
	st, err := OpenWith(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = OpenWith(context.Background(), path, Options{MustExist: true})
	if err != nil {
		t.Fatalf("MustExist on an existing database: %v", err)
	}
	st.Close()
	if _, err := os.Stat(keyFilePath(path)); err != nil {
		t.Fatalf("key file: %v", err)
	}
}

// A database whose directory does not exist is reported as such, before the key file is looked
// for (it used to fail creating a temporary key file in that directory).
func TestOpenMissingDirectory(t *testing.T) {
	t.Setenv(SecretKeyEnv, "")
	missing := filepath.Join(t.TempDir(), "nodir")
	for _, opts := range []Options{{}, {MustExist: true}} {
		_, err := OpenWith(context.Background(), filepath.Join(missing, "edgeplane.db"), opts)
		if err == nil || !strings.Contains(err.Error(), "the directory "+missing+" of the database") ||
			!strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "key") {
			t.Fatalf("%+v: %v", opts, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWith(context.Background(), filepath.Join(file, "edgeplane.db"), Options{}); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("a file as the directory: %v", err)
	}
	if _, err := OpenWith(context.Background(), "", Options{}); err == nil || !strings.Contains(err.Error(), "empty SQLite path") {
		t.Fatalf("empty path: %v", err)
	}
}
