package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// The commands besides serve. Each works on an existing database: a SQLite path where there is
// none (a mistyped --db) is refused, and nothing is created. Only serve, and import into a
// database named explicitly, create one.

// openExisting opens the database of a command that needs one that exists.
func openExisting(ctx context.Context, dsn string) (*store.Store, error) {
	return store.OpenWith(ctx, dsn, store.Options{MustExist: true})
}

// secretsCmd manages the key that encrypts private keys at rest: new-key prints a fresh key for
// EDGEPLANE_SECRET_KEY; rotate re-encrypts every secret with the first key of
// EDGEPLANE_SECRET_KEY=NEW,OLD so the old key can be dropped.
func secretsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	switch args[0] {
	case "new-key":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprintf(stdout, "usage: edgeplane secrets new-key\n\nprints a new random key for %s\n", store.SecretKeyEnv)
			return nil
		}
		if len(args) > 1 {
			return fmt.Errorf("secrets new-key takes no arguments")
		}
		fmt.Fprintln(stdout, store.NewSecretKey())
		return nil
	case "rotate":
		fs := newFlags("secrets rotate", stdout, stderr)
		dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database (env EDGEPLANE_DB)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("secrets rotate takes no arguments, got %q", fs.Args())
		}
		st, err := openExisting(ctx, *dsn)
		if err != nil {
			return err
		}
		defer st.Close()
		n, err := st.RotateSecrets(ctx)
		if err != nil {
			return fmt.Errorf("secrets rotate: nothing was re-encrypted: %w", err)
		}
		fmt.Fprintf(stderr, "edgeplane: re-encrypted %d secrets (of objects and of the deployment) with the first key of %s\n", n, store.SecretKeyEnv)
		return nil
	}
	return fmt.Errorf("unknown secrets command %q\n%s", args[0], usage)
}

// export writes a backup of the whole database to stdout.
func export(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("export", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database to back up (env EDGEPLANE_DB)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("export takes no arguments, got %q; redirect stdout to a file", fs.Args())
	}
	st, err := openExisting(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Export(ctx, stdout)
}

// importBackup restores a backup from stdin into an empty database. It creates a new SQLite
// database only when --db or EDGEPLANE_DB names it: the default path must exist.
func importBackup(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("import", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "empty database to restore into; a new SQLite file when named here or in EDGEPLANE_DB (env EDGEPLANE_DB)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("import takes no arguments, got %q; redirect stdin from a file", fs.Args())
	}
	named := flagGiven(fs, "db") || os.Getenv("EDGEPLANE_DB") != ""
	created := newDatabaseFiles(*dsn)
	st, err := store.OpenWith(ctx, *dsn, store.Options{MustExist: !named})
	if errors.Is(err, store.ErrNoDatabase) {
		return fmt.Errorf("%w; to restore into a new database, name it with --db", err)
	}
	if err != nil {
		return err
	}
	closeStore := sync.OnceFunc(func() { st.Close() })
	defer closeStore()
	stopProgress := func() {}
	if isTerminal(stderr) {
		// A large backup takes minutes: on a terminal, say how far the restore has got.
		var rows atomic.Int64
		ctx = store.WithImportProgress(ctx, &rows)
		stopProgress = showProgress(stderr, "import", "rows restored", &rows, progressInterval)
	}
	err = st.Import(ctx, stdin)
	stopProgress()
	if err != nil {
		// A refused restore into a new database leaves no database and no key file behind.
		closeStore()
		removeFiles(created)
		return err
	}
	fmt.Fprintln(stderr, "edgeplane: backup restored")
	return nil
}

func apikeyCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apikey create", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database: a SQLite path, sqlite:PATH or a postgres:// URL (env EDGEPLANE_DB)")
	account := fs.String("account", "default", "account name; created with its admin user when absent")
	description := fs.String("description", "", "description of the new key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("apikey create takes no arguments, got %q (did you mean --account %s?)", fs.Args(), fs.Arg(0))
	}
	if *account == "" {
		return errors.New("--account must not be empty")
	}
	if len(*description) > ep.MaxDescription {
		return fmt.Errorf("--description must be at most %d bytes", ep.MaxDescription)
	}
	st, err := openExisting(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	admin, _, err := st.EnsureAccount(ctx, *account)
	if err != nil {
		return err
	}
	token, err := newKey(ctx, st, admin, *description)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}

func newKey(ctx context.Context, st *store.Store, admin ep.Caller, description string) (string, error) {
	doc, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{AnnotationFields: ep.AnnotationFields{Description: &description}})
	if err != nil {
		return "", err
	}
	return *doc.(*ep.APIKey).Token, nil
}

// bootstrap gives an empty database its first account, admin and API key, and shows the token
// once with announce. When several replicas start together on one empty database, only the one
// that created the account creates the key.
func bootstrap(ctx context.Context, st *store.Store, announce func(token string)) error {
	if has, err := st.HasAccounts(ctx); err != nil || has {
		return err
	}
	admin, created, err := st.EnsureAccount(ctx, "default")
	if err != nil || !created {
		return err
	}
	token, err := newKey(ctx, st, admin, "created at first start")
	if err != nil {
		return err
	}
	announce(token)
	return nil
}

// tokenAnnouncer is how serve shows the first API key's token. With text logs it prints the
// block of plain text the README shows. With JSON logs it writes one JSON log record, whatever
// the log level, so that the log stays one JSON object per line: msg says what happened and
// token holds the token.
func tokenAnnouncer(stderr io.Writer, log *slog.Logger, format string) func(token string) {
	if format != "json" {
		return func(token string) {
			fmt.Fprintf(stderr, "edgeplane: this database was empty, so account \"default\" and its first admin API key were created.\n"+
				"API key token (save it now; it will not be shown again):\n\n    %s\n\n", token)
		}
	}
	return func(token string) {
		rec := slog.NewRecord(time.Now(), slog.LevelWarn, `this database was empty, so account "default" and its first admin API key were created; `+
			`save the API key token now, it will not be shown again`, 0)
		rec.AddAttrs(slog.String("account", "default"), slog.String("token", token))
		_ = log.Handler().Handle(context.Background(), rec)
	}
}
