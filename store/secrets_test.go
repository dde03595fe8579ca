package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealer(t *testing.T) {
	k1, k2 := NewSecretKey(), NewSecretKey()
	keys, err := parseKeys(k1, "test")
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := newSealer(keys, "test")
	sealed, err := s1.seal("cert_1", "-----BEGIN PRIVATE KEY-----\nabc\n")
	if err != nil || !strings.HasPrefix(sealed, sealPrefix) || strings.Contains(sealed, "PRIVATE") {
		t.Fatalf("seal: %q %v", sealed, err)
	}
	if plain, err := s1.open("cert_1", sealed); err != nil || plain != "-----BEGIN PRIVATE KEY-----\nabc\n" {
		t.Fatalf("open: %q %v", plain, err)
	}
	if _, err := s1.open("cert_2", sealed); err == nil {
		t.Fatal("a secret opened for another object")
	}
	if _, err := s1.open("cert_1", sealed[:len(sealed)-4]+"AAAA"); err == nil {
		t.Fatal("a tampered secret opened")
	}
	if _, err := s1.open("cert_1", "plain text"); err == nil {
		t.Fatal("an unencrypted value opened")
	}
	// Rotation: NEW,OLD opens what OLD sealed and seals with NEW; NEW alone cannot open OLD's.
	both, _ := parseKeys(k2+","+k1, "test")
	s21, _ := newSealer(both, "test")
	if _, err := s21.open("cert_1", sealed); err != nil {
		t.Fatalf("rotation keys do not open the old secret: %v", err)
	}
	resealed, _ := s21.seal("cert_1", "x")
	only2, _ := parseKeys(k2, "test")
	s2, _ := newSealer(only2, "test")
	if _, err := s2.open("cert_1", resealed); err != nil {
		t.Fatalf("new key does not open what it sealed: %v", err)
	}
	if _, err := s2.open("cert_1", sealed); err == nil || !strings.Contains(err.Error(), "not among the keys") {
		t.Fatalf("a retired key's secret: %v", err)
	}
	for _, bad := range []string{"short", "zz", strings.Repeat("a", 64) + "00"} {
		if keys, err := parseKeys(bad, "test"); err == nil {
			if _, err := newSealer(keys, "test"); err == nil {
				t.Errorf("key %q accepted", bad)
			}
		}
	}
}

func TestSecretKeySources(t *testing.T) {
	t.Setenv(SecretKeyEnv, "")
	dir := t.TempDir()
	db := filepath.Join(dir, "edgeplane.db")
	// No key file yet: openSealer makes none; OpenWith makes it once the database holds no secret.
	if _, err := openSealer(db, Options{}); !errors.Is(err, errNoKeyFile) {
		t.Fatalf("no key file: %v", err)
	}
	if _, err := os.Stat(keyFilePath(db)); err == nil {
		t.Fatal("openSealer made a key file")
	}
	store, err := OpenWith(context.Background(), db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	st, err := os.Stat(keyFilePath(db))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, st)
	}
	first, _ := os.ReadFile(keyFilePath(db))
	if _, err := openSealer("sqlite:"+db, Options{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(keyFilePath(db)); string(again) != string(first) {
		t.Fatal("the key file was replaced on a second open")
	}
	os.Chmod(keyFilePath(db), 0o644)
	if _, err := openSealer(db, Options{}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable key file: %v", err)
	}
	if _, err := openSealer("postgres://x@127.0.0.1/db", Options{}); err == nil || !strings.Contains(err.Error(), SecretKeyEnv) {
		t.Fatalf("PostgreSQL without a key: %v", err)
	}
	t.Setenv(SecretKeyEnv, NewSecretKey())
	if _, err := openSealer("postgres://x@127.0.0.1/db", Options{}); err != nil {
		t.Fatalf("PostgreSQL with a key: %v", err)
	}
	t.Setenv(SecretKeyEnv, "not-a-key")
	if _, err := openSealer(db, Options{}); err == nil {
		t.Fatal("a bad EDGEPLANE_SECRET_KEY was accepted")
	}
}
