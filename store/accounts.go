package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"

	ep "github.com/edgeplane/edgeplane"
)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Store) principal(ctx context.Context, q querier, account, id string) (ep.Principal, error) {
	var (
		p      ep.Principal
		role   string
		active int
	)
	if !storable(id) {
		return p, ep.NotFound()
	}
	err := q.QueryRowContext(ctx, s.q.principalGet, id, account).Scan(&p.ID, &p.AccountID, &role, &active)
	if errors.Is(err, sql.ErrNoRows) {
		return p, ep.NotFound()
	}
	p.Role, p.Active = ep.Role(role), active != 0
	return p, s.classify(err)
}

// HasAccounts reports whether any account exists: serve bootstraps an empty database.
func (s *Store) HasAccounts(ctx context.Context) (bool, error) {
	var n int
	err := s.rd.QueryRowContext(ctx, s.q.accountsAny).Scan(&n)
	return n > 0, s.classify(err)
}

// adminCaller is the caller acting as the admin user userID of the account.
func adminCaller(accountID, userID string) ep.Caller {
	return ep.Caller{AccountID: accountID, Principal: ep.Principal{ID: userID, AccountID: accountID, Role: ep.RoleAdmin, Active: true}}
}

// FindAccount returns the admin of the account with the given name; found is false when there
// is none. The apikey command refuses a name that matches no account rather than creating one.
func (s *Store) FindAccount(ctx context.Context, name string) (admin ep.Caller, found bool, err error) {
	var accountID, userID string
	err = s.rd.QueryRowContext(ctx, s.q.accountByName, name).Scan(&accountID, &userID)
	if errors.Is(err, sql.ErrNoRows) {
		return admin, false, nil
	}
	if err != nil {
		return admin, false, s.classify(err)
	}
	return adminCaller(accountID, userID), true, nil
}

// AccountNames returns the names of the first limit accounts, in order: the apikey command lists
// them when it refuses a name that matches none.
func (s *Store) AccountNames(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.rd.QueryContext(ctx, s.d.rebind(`SELECT name FROM accounts ORDER BY name LIMIT ?`), limit)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, s.classify(err)
		}
		names = append(names, name)
	}
	return names, s.classify(rows.Err())
}

// EnsureAccount returns the admin of the account with the given name, creating the account and
// its admin user when absent; created says whether it did. Safe against concurrent callers (two
// replicas starting at once, or the apikey command while a server runs): the account name is
// unique, and the loser of a race reads the winner's account.
func (s *Store) EnsureAccount(ctx context.Context, name string) (admin ep.Caller, created bool, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		created = false
		var accountID, userID string
		err := tx.QueryRowContext(ctx, s.q.accountByName, name).Scan(&accountID, &userID)
		if err == nil {
			admin = adminCaller(accountID, userID)
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return s.classify(err)
		}
		accountID, t := ep.NewID(ep.AccountPrefix)
		if _, err := tx.ExecContext(ctx, s.q.accountIns, accountID, name, ep.FormatTime(t)); err != nil {
			if s.d.uniqueViolation(err) {
				return errRetry
			}
			return s.classify(err)
		}
		p, err := s.addPrincipal(ctx, tx, accountID, ep.RoleAdmin)
		if err != nil {
			return err
		}
		admin, created = ep.Caller{AccountID: accountID, Principal: p}, true
		return nil
	})
	return admin, created, err
}

// AddUser adds a user with the role to an existing account. Users have no API collection; the
// command line and tests create them.
func (s *Store) AddUser(ctx context.Context, accountID string, role ep.Role) (p ep.Principal, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		var id string
		if err := tx.QueryRowContext(ctx, s.q.accountGet, accountID).Scan(&id); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ep.NotFound()
			}
			return s.classify(err)
		}
		p, err = s.addPrincipal(ctx, tx, accountID, role)
		return err
	})
	return p, err
}

func (s *Store) addPrincipal(ctx context.Context, tx *wtx, accountID string, role ep.Role) (ep.Principal, error) {
	id, t := ep.NewID(ep.UserPrefix)
	p := ep.Principal{ID: id, AccountID: accountID, Role: role, Active: true}
	_, err := tx.ExecContext(ctx, s.q.principalIns, id, accountID, string(role), 1, ep.FormatTime(t))
	return p, s.classify(err)
}

// Authenticate finds the API key of a presented token with one indexed query and checks its
// secret in constant time. A token that is unknown, of a deleted key, or wrong is ErrUnknownKey;
// a key of an inactive bot user is ErrInactiveKey (the server words them as 401s).
func (s *Store) Authenticate(ctx context.Context, selector, secret string) (ep.Caller, error) {
	v, cacheable := s.cache.version()
	if cacheable {
		if k, ok := s.cache.key(v, selector); ok {
			s.cache.count(true)
			return k.caller(s, nil, secret)
		}
		s.cache.count(false)
	}
	if !storable(selector) {
		return ep.Caller{}, ErrUnknownKey // no key has it, and PostgreSQL would refuse the query
	}
	if s.combine != nil {
		l, err := s.combine.do(ctx, selector, "", "")
		if err != nil {
			return ep.Caller{}, s.classify(err)
		}
		return l.k.caller(s, l.err, secret)
	}
	var k keyRow
	err := s.rd.QueryRowContext(ctx, s.q.auth, selector, ep.APIKeys.Kind).Scan(k.dest()...)
	if err == nil && cacheable {
		s.cache.fill(v, selector, k, "", nil)
	}
	return k.caller(s, err, secret)
}

// AuthenticateGet is Authenticate followed by Get, in one query: the read of nearly every
// automation run, whose cost is mostly the per-query cost of the database (a read transaction
// and a round trip), paid here once instead of twice, and on SQLite not at all while the
// database has not changed since the same key and object were read (readcache.go). Its answers
// are exactly those of the two calls in sequence: an authentication error first, then the
// object's.
//
// For an object of the read cache it also returns the object's Rendered: when that holds a body
// rendered under renderKey, the document is not decoded (doc is nil) and the body is the answer;
// otherwise the caller may store the body it renders from doc there. Rendered is nil for objects
// outside the cache and for collections that embed others.
func (s *Store) AuthenticateGet(ctx context.Context, selector, secret string, res *ep.Resource, parentID, id, renderKey string) (ep.Caller, ep.Document, *Rendered, error) {
	if !storable(id) || !storable(parentID) || !storable(selector) {
		// Such an id is never found; the key is still checked first.
		c, err := s.Authenticate(ctx, selector, secret)
		if err == nil {
			err = ep.NotFound()
		}
		return c, nil, nil, err
	}
	var (
		k   keyRow
		obj cachedObject
		err error
	)
	v, cacheable := s.cache.version()
	hit := false
	if cacheable {
		k, obj, hit = s.cache.keyAndObject(v, selector, id)
		hit = hit && obj.account == k.c.AccountID && obj.kind == res.Kind
		s.cache.count(hit)
	}
	switch {
	case hit:
	case s.combine != nil:
		var l *lookup
		if l, err = s.combine.do(ctx, selector, id, res.Kind); err == nil {
			k, obj, err = l.k, cachedObject{doc: l.doc, parent: l.parent}, l.err
		}
	default:
		obj = cachedObject{}
		err = s.rd.QueryRowContext(ctx, s.q.authGet, id, res.Kind, selector, ep.APIKeys.Kind).
			Scan(append(k.dest(), &obj.doc, &obj.parent)...)
		if err == nil && cacheable {
			var o *cachedObject
			if obj.doc != nil {
				obj = newCachedObject(k.c.AccountID, res, obj.parent, obj.doc)
				o = &obj
			}
			s.cache.fill(v, selector, k, id, o)
		}
	}
	c, err := k.caller(s, err, secret)
	if err != nil {
		return c, nil, nil, err
	}
	if obj.doc == nil || (res.Parent != nil && obj.parent.String != parentID) {
		return c, nil, nil, ep.NotFound()
	}
	if obj.rendered != nil && obj.rendered.Body(renderKey) != nil {
		return c, nil, obj.rendered, nil
	}
	doc, err := decode(res, obj.doc)
	if err != nil {
		return c, nil, nil, err
	}
	return c, doc, obj.rendered, s.complete(ctx, c.AccountID, res, doc)
}

// keyRow is an API key as the authentication queries read it.
type keyRow struct {
	hash   string
	c      ep.Caller
	role   string
	active int
	// digest is hash decoded, when decoded is set: the read cache decodes the keys it keeps once,
	// not at every request that presents them.
	digest  [sha256.Size]byte
	decoded bool
}

// decode sets digest from hash, when hash is the hex of a SHA-256 digest.
func (k *keyRow) decode() {
	if len(k.hash) == 2*sha256.Size {
		_, err := hex.Decode(k.digest[:], []byte(k.hash))
		k.decoded = err == nil
	}
}

func (k *keyRow) dest() []any {
	return []any{&k.hash, &k.c.AccountID, &k.c.KeyID, &k.c.Principal.ID, &k.role, &k.active}
}

// caller checks the presented secret against the key read with error err, in constant time.
func (k *keyRow) caller(s *Store, err error, secret string) (ep.Caller, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return ep.Caller{}, ErrUnknownKey
	}
	if err != nil {
		return ep.Caller{}, s.classify(err)
	}
	if !k.decoded {
		k.decode()
	}
	if !k.decoded || !ep.SecretMatches(secret, k.digest[:]) {
		return ep.Caller{}, ErrUnknownKey
	}
	if k.active == 0 {
		return ep.Caller{}, ErrInactiveKey
	}
	c := k.c
	c.Principal.AccountID, c.Principal.Role, c.Principal.Active = c.AccountID, ep.Role(k.role), true
	return c, nil
}

// The errors of Authenticate and AuthenticateGet for a presented key the store refuses. They are
// facts, not answers: the server turns them into its 401 responses, with their wording.
var (
	// ErrUnknownKey is a token that is unknown, of a deleted key, or with a wrong secret.
	ErrUnknownKey = errors.New("store: unknown API key")
	// ErrInactiveKey is a key whose owning bot user is inactive.
	ErrInactiveKey = errors.New("store: the API key's bot user is inactive")
)
