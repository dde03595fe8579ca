package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
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
		return &usageError{cmd: "secrets", err: errors.New("missing its command: secrets new-key or secrets rotate"), showUsage: true}
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	switch args[0] {
	case "new-key":
		fs := newFlags("secrets new-key", stdout, stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if err := noArgs(fs, ""); err != nil {
			return err
		}
		fmt.Fprintln(stdout, store.NewSecretKey())
		return nil
	case "rotate":
		fs := newFlags("secrets rotate", stdout, stderr)
		dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database (env EDGEPLANE_DB)")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if err := noArgs(fs, ""); err != nil {
			return err
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
	return unknownWord("secrets", args[0], []string{"new-key", "rotate"})
}

// export writes a backup of the whole database to stdout, and with --key-file the keys its
// secrets need to a new file.
func export(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("export", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database to back up (env EDGEPLANE_DB)")
	keyFile := fs.String("key-file", "", "also write the key(s) that decrypt the backup's secrets to this new file, of mode 600; keep it apart from the backup")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "redirect stdout to a file"); err != nil {
		return err
	}
	st, err := openExisting(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	if *keyFile == "" {
		return st.Export(ctx, stdout)
	}
	keys, err := store.SecretKeys(*dsn, store.Options{})
	if err != nil {
		return err
	}
	if err := writeNewPrivateFile(*keyFile, keys+"\n"); err != nil {
		return fmt.Errorf("--key-file: %w", err)
	}
	if err := st.Export(ctx, stdout); err != nil {
		os.Remove(*keyFile) // the key of no backup
		return err
	}
	fmt.Fprintf(stderr, "edgeplane: the key(s) the backup's secrets need are in %s (mode 600); keep that file apart from the backup, and give it to import --key-file\n", *keyFile)
	return nil
}

// writeNewPrivateFile writes data to a file at path that must not exist yet, readable by its
// owner only: a key is never written over another file, nor left readable by others.
func writeNewPrivateFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// importBackup restores a backup from stdin into an empty database. It creates a new SQLite
// database only when --db or EDGEPLANE_DB names it: the default path must exist.
func importBackup(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("import", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "empty database to restore into; a new SQLite file when named here or in EDGEPLANE_DB (env EDGEPLANE_DB)")
	keyFile := fs.String("key-file", "", "file of the key(s) that decrypt the backup's secrets (written by export --key-file, or the source's .key file); they are encrypted again under this database's own key")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "redirect stdin from a file"); err != nil {
		return err
	}
	var restoreKeys string
	if *keyFile != "" {
		var err error
		if restoreKeys, err = store.ReadKeyFile(*keyFile); err != nil {
			return fmt.Errorf("--key-file: %w", err)
		}
	}
	named := flagGiven(fs, "db") || os.Getenv("EDGEPLANE_DB") != ""
	created := newDatabaseFiles(*dsn)
	st, err := store.OpenWith(ctx, *dsn, store.Options{MustExist: !named, RestoreKeys: restoreKeys})
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
	if *keyFile == "" {
		fmt.Fprintln(stderr, "edgeplane: backup restored")
		return nil
	}
	own := store.SecretKeyEnv
	if os.Getenv(store.SecretKeyEnv) == "" && !store.IsPostgres(*dsn) {
		own = "its key file " + strings.TrimPrefix(*dsn, "sqlite:") + ".key"
	}
	fmt.Fprintf(stderr, "edgeplane: backup restored; its secrets are now encrypted under this database's own key (%s), which serve needs, not %s\n", own, *keyFile)
	return nil
}

// apikeyCreate makes an API key for an account and prints its token. An account is created only
// when asked for: a misspelled name would otherwise make a new, empty account whose key sees
// nothing.
func apikeyCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apikey create", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database: a SQLite path, sqlite:PATH or a postgres:// URL (env EDGEPLANE_DB)")
	account := fs.String("account", "default", "name of the account the key belongs to; it must exist unless --create-account is given")
	createAccount := fs.Bool("create-account", false, "create the account, with its admin user, when it does not exist")
	description := fs.String("description", "", "description of the new key")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("apikey create", "unexpected arguments %q: it takes none (did you mean --account %s?)", fs.Args(), fs.Arg(0))
	}
	if *account == "" {
		return usageErrorf("apikey create", "--account must not be empty")
	}
	if len(*description) > ep.MaxDescription {
		return usageErrorf("apikey create", "--description must be at most %d bytes", ep.MaxDescription)
	}
	st, err := openExisting(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	admin, found, err := st.FindAccount(ctx, *account)
	if err != nil {
		return err
	}
	if !found && !*createAccount {
		return unknownAccount(ctx, st, *account)
	}
	if !found {
		var created bool
		if admin, created, err = st.EnsureAccount(ctx, *account); err != nil {
			return err
		}
		if created {
			fmt.Fprintf(stderr, "edgeplane: created account %q with its admin user; it sees none of the other accounts' objects\n", *account)
		}
	}
	token, err := newKey(ctx, st, admin, *description)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	return nil
}

// unknownAccount is apikey create's refusal of an account that does not exist: it names the
// accounts there are (the first few) and how to create one.
func unknownAccount(ctx context.Context, st *store.Store, name string) error {
	const shown = 10
	names, err := st.AccountNames(ctx, shown+1)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("account %q does not exist; nothing was created", name)
	if s := closest(name, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if len(names) > shown {
		msg += fmt.Sprintf(". Accounts: %s, …", strings.Join(names[:shown], ", "))
	} else if len(names) > 0 {
		msg += fmt.Sprintf(". Accounts: %s", strings.Join(names, ", "))
	}
	return errors.New(msg + ". To create it, add --create-account")
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
