package store_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// TestImportWithRestoreKeys: a store opened with Options.RestoreKeys (the source's key, carried
// beside a backup) imports a backup taken under that key and encrypts every secret again under
// its own first key in the same transaction, so that it opens and serves them with its own key
// alone; restore keys that do not open the backup's secrets restore nothing; FindAccount and
// AccountNames see the restored accounts.
func TestImportWithRestoreKeys(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		sourceKey, targetKey := store.NewSecretKey(), store.NewSecretKey()
		s := openKeyed(t, dsn, sourceKey)
		c := admin(t, s, "carried")
		_, r1, r2 := secretRoutes(t, s, c)
		var backup bytes.Buffer
		if err := s.Export(ctx, &backup); err != nil {
			t.Fatal(err)
		}
		s.Close()
		engine := "sqlite"
		if store.IsPostgres(dsn) {
			engine = "postgres"
		}

		wrongDSN := testdb.Fresh(t, engine)
		wrong, err := store.OpenWith(ctx, wrongDSN, store.Options{SecretKeys: targetKey, RestoreKeys: store.NewSecretKey()})
		if err != nil {
			t.Fatal(err)
		}
		defer wrong.Close()
		if err := wrong.Import(ctx, bytes.NewReader(backup.Bytes())); !errors.Is(err, store.ErrSecretsUndecryptable) || !strings.Contains(err.Error(), "Nothing was restored") {
			t.Fatalf("import with restore keys that do not fit: %v", err)
		}
		if _, found, err := wrong.FindAccount(ctx, "carried"); err != nil || found {
			t.Fatalf("the refused import restored the account: %v %v", found, err)
		}

		target := testdb.Fresh(t, engine)
		r, err := store.OpenWith(ctx, target, store.Options{SecretKeys: targetKey, RestoreKeys: sourceKey})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Import(ctx, bytes.NewReader(backup.Bytes())); err != nil {
			t.Fatalf("import with the source's key as restore key: %v", err)
		}
		r.Close()
		own := openKeyed(t, target, targetKey) // the target's own key only
		defer own.Close()
		if err := own.CheckSecrets(ctx); err != nil {
			t.Fatalf("the restored secrets under the target's own key: %v", err)
		}
		if got := snapshotSecrets(t, own, c.AccountID, r1, r2); got != [3]string{webhookPlain, oauthPlain, oidcPlain} {
			t.Fatalf("after the import: %q", got)
		}
		if a, found, err := own.FindAccount(ctx, "carried"); err != nil || !found || a.AccountID != c.AccountID || a.Principal.ID != c.Principal.ID {
			t.Fatalf("FindAccount: %+v %v %v, want %+v", a, found, err, c)
		}
		if names, err := own.AccountNames(ctx, 5); err != nil || strings.Join(names, ",") != "carried" {
			t.Fatalf("AccountNames: %q %v", names, err)
		}
	})
}

// Restore keys that are no keys are refused before anything is opened or created.
func TestRestoreKeysChecked(t *testing.T) {
	dsn := testdb.Fresh(t, "sqlite")
	if _, err := store.OpenWith(context.Background(), dsn, store.Options{RestoreKeys: "not-a-key"}); err == nil ||
		!strings.Contains(err.Error(), "neither base64 nor hex") {
		t.Fatalf("OpenWith with a bad restore key: %v", err)
	}
	if _, err := os.Stat(dsn); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused open created %s: %v", dsn, err)
	}
}
