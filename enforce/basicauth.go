package enforce

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"

	"golang.org/x/crypto/bcrypt"
)

// BasicAuth is an agent bind's basic_auth option: a request must carry the username and
// password of one of the credentials, else it gets 401 with a WWW-Authenticate challenge.
// Cleartext passwords are kept only as SHA-256 digests and compared in constant time; hashed
// passwords are bcrypt hashes.
type BasicAuth struct {
	users map[string]basicCred
}

type basicCred struct {
	sum    [32]byte
	bcrypt []byte
}

// BasicCredential is one username and password of the option.
type BasicCredential struct {
	Username, CleartextPassword string
	HashedPassword              []byte
}

// NewBasicAuth builds the stage; it refuses an empty list or a credential without a username
// or password, which would otherwise admit no one or anyone.
func NewBasicAuth(creds []BasicCredential) (*BasicAuth, error) {
	if len(creds) == 0 {
		return nil, errors.New("basic auth needs at least one credential")
	}
	b := &BasicAuth{users: map[string]basicCred{}}
	for _, c := range creds {
		if c.Username == "" || (c.CleartextPassword == "" && len(c.HashedPassword) == 0) {
			return nil, errors.New("every basic auth credential needs a username and a password")
		}
		b.users[c.Username] = basicCred{sum: sha256.Sum256([]byte(c.CleartextPassword)), bcrypt: c.HashedPassword}
	}
	return b, nil
}

// Name is the module's name.
func (b *BasicAuth) Name() string { return "basic_auth" }

// Wrap admits a request with valid credentials and challenges any other.
func (b *BasicAuth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.admits(r) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="edgeplane", charset="UTF-8"`)
		ErrorPage(w, r, http.StatusUnauthorized, 3401, "This endpoint requires a username and password.")
	})
}

func (b *BasicAuth) admits(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	c, known := b.users[user]
	if !known {
		return false
	}
	if c.bcrypt != nil {
		return bcrypt.CompareHashAndPassword(c.bcrypt, []byte(pass)) == nil
	}
	sum := sha256.Sum256([]byte(pass))
	return subtle.ConstantTimeCompare(sum[:], c.sum[:]) == 1
}
