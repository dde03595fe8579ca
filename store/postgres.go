package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

type pgDialect struct{}

func (pgDialect) name() string { return "postgres" }
func (pgDialect) remote() bool { return true }

// rebind turns ? placeholders into $1, $2, … (no query of ours has a literal ? in a string).
func (pgDialect) rebind(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func (pgDialect) ddl(stmt string) string { return stmt }

func (pgDialect) forShare() string  { return " FOR SHARE" }
func (pgDialect) forUpdate() string { return " FOR UPDATE" }

// serialLockClass is the first key of the transaction-scoped advisory locks of serialLock (the
// second is a hash of the account id); two-key advisory locks never collide with the one-key
// migration lock. A hash collision between two accounts only makes them take turns.
const serialLockClass = 0x65706267 // "epbg"

func (pgDialect) serialLock() string {
	return `SELECT pg_advisory_xact_lock(` + strconv.Itoa(serialLockClass) + `, hashtext(?))`
}

// nameLockClass is the first key of the advisory locks of nameLock, whose second is a hash of
// the name; a collision between two names only makes their writers take turns.
const nameLockClass = 0x65706e6d // "epnm"

func (pgDialect) nameLock() string {
	return `SELECT pg_advisory_xact_lock(` + strconv.Itoa(nameLockClass) + `, hashtext(?))`
}

func (pgDialect) nameLockShared() string {
	return `SELECT pg_advisory_xact_lock_shared(` + strconv.Itoa(nameLockClass) + `, hashtext(?))`
}

// SQLSTATEs: class 23 integrity, class 08 connection, 57P01-03 server shutting down or starting.
func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func (pgDialect) uniqueViolation(err error) bool { return pgCode(err) == "23505" }
func (pgDialect) fkViolation(err error) bool     { return pgCode(err) == "23503" }

// transient: 40P01 deadlock detected, 40001 serialization failure.
func (pgDialect) transient(err error) bool {
	c := pgCode(err)
	return c == "40P01" || c == "40001"
}

// unavailable: a connection error class or shutdown code from the server, or no answer at all:
// the connection could not be made, broke, or was already closed by pgx after it broke (its
// "conn closed", which whatever the transaction runs next, its COMMIT included, fails with).
func (pgDialect) unavailable(err error) bool {
	code := pgCode(err)
	if strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" {
		return true
	}
	if code != "" {
		return false // the server answered: not an outage
	}
	var (
		connect *pgconn.ConnectError
		netErr  net.Error
	)
	return errors.As(err, &connect) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, pgconn.ErrConnClosed)
}

// migrationLockKey is the advisory lock that serialises migrations of replicas starting at once.
const migrationLockKey = 0x65646765706c616e // "edgeplan"

func (pgDialect) lockMigrations(ctx context.Context, conn *sql.Conn) (func(), error) {
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLockKey)); err != nil {
		return nil, err
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(migrationLockKey))
	}, nil
}

// Defaults for PostgreSQL connections, used when the DSN does not set them.
const (
	defaultPGConnectTimeout = 5 // seconds
	DefaultPGMaxConns       = 16
)

// openPostgres opens a pool through pgx's database/sql driver. Reads and writes share the pool:
// PostgreSQL has real concurrency, and compare-and-swap updates keep replicas correct.
func openPostgres(ctx context.Context, dsn string, opts Options) (*Store, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: the PostgreSQL DSN is not a URL: %w", err)
	}
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", strconv.Itoa(defaultPGConnectTimeout))
	}
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		return nil, err
	}
	n := opts.MaxConns
	if n <= 0 {
		n = DefaultPGMaxConns
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour)
	pctx, cancel := context.WithTimeout(ctx, (defaultPGConnectTimeout+1)*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connect to PostgreSQL at %s: %w", redact(u), err)
	}
	st := &Store{d: pgDialect{}, w: db, r: db}
	st.notify = newNotifier(st, u.String())
	return st, nil
}

// redact hides the password of a DSN for messages.
func redact(u *url.URL) string {
	c := *u
	if _, has := c.User.Password(); has {
		c.User = url.UserPassword(c.User.Username(), "xxxxx")
	}
	c.RawQuery = ""
	return c.String()
}

// RedactDSN returns dsn fit for a log line: a PostgreSQL URL without its password and query
// (which may hold one too); a SQLite path as it is.
func RedactDSN(dsn string) string {
	if !IsPostgres(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparseable DSN)"
	}
	return redact(u)
}
