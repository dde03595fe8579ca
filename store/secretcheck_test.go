package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// Rotation and the start-up check cover the deployment's secrets (system_secrets, sealed with
// "system:"+name) as well as objects': after NEW,OLD rotates, NEW alone decrypts edgeplane's CA
// key; under a key that did not seal it, CheckSecrets refuses, naming the key ids.
func TestSystemSecretsRotateAndCheck(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	oldKey, newKey := NewSecretKey(), NewSecretKey()
	open := func(keys string) *Store {
		t.Helper()
		st, err := OpenWith(ctx, db, Options{SecretKeys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open(oldKey)
	_, priv, err := st.SystemSecret(ctx, "ca", func() (string, string, error) { return "public", "private", nil })
	if err != nil || priv != "private" {
		t.Fatalf("SystemSecret: %q %v", priv, err)
	}
	if err := st.CheckSecrets(ctx); err != nil {
		t.Fatalf("CheckSecrets under the sealing key: %v", err)
	}
	st.Close()

	st = open(newKey)
	err = st.CheckSecrets(ctx)
	if !errors.Is(err, ErrSecretsUndecryptable) || !strings.Contains(err.Error(), "1 of 1 secrets do not decrypt") ||
		!strings.Contains(err.Error(), "system_secrets ca") || !strings.Contains(err.Error(), SecretKeyEnv) {
		t.Fatalf("CheckSecrets under another key: %v", err)
	}
	if n, err := st.RotateSecrets(ctx); err == nil || n != 0 {
		t.Fatalf("RotateSecrets without the old key: %d %v", n, err)
	}
	st.Close()

	st = open(newKey + "," + oldKey)
	if n, err := st.RotateSecrets(ctx); err != nil || n != 1 {
		t.Fatalf("RotateSecrets NEW,OLD: %d %v, want 1", n, err)
	}
	st.Close()

	st = open(newKey)
	defer st.Close()
	if err := st.CheckSecrets(ctx); err != nil {
		t.Fatalf("CheckSecrets under NEW after the rotation: %v", err)
	}
	if _, priv, err := st.SystemSecret(ctx, "ca", nil); err != nil || priv != "private" {
		t.Fatalf("the CA key after the rotation: %q %v", priv, err)
	}
}
