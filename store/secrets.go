package store

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// Secrets (the private keys of TLS certificates, SSH certificate authorities and the SAML request
// signing certificates of HTTPS edge routes) live in the
// "secrets" table, one row per object, beside the object's document and never inside it, so no
// rendering of a document can show one. They are encrypted at rest with AES-256-GCM; the
// object's id is the additional data, so a ciphertext moved to another row does not open.
// putSecret and (*txView).Secret are the only code that writes or reads the table.
const (
	secretIns = `INSERT INTO secrets (object_id, account_id, data) VALUES (?, ?, ?)`
	secretGet = `SELECT data FROM secrets WHERE object_id = ? AND account_id = ?`
)

// SecretKeyEnv names the variable holding the secret encryption keys: one or more 32-byte keys,
// base64 or hex, comma-separated; the first encrypts, all decrypt (for rotation).
const SecretKeyEnv = "EDGEPLANE_SECRET_KEY"

// sealPrefix marks ciphertexts: "ep1:<key id>:<base64 of nonce and sealed data>".
const sealPrefix = "ep1:"

// sealer encrypts and decrypts secrets; keys[0] encrypts.
type sealer struct {
	keys []sealKey
	// source says where the keys came from, for messages.
	source string
}

type sealKey struct {
	id   string // first 8 hex digits of SHA-256 of the key: which key sealed a secret
	aead cipher.AEAD
}

func newSealer(raw [][]byte, source string) (*sealer, error) {
	s := &sealer{source: source}
	for i, k := range raw {
		if len(k) != 32 {
			return nil, fmt.Errorf("store: secret key %d from %s is %d bytes; want 32 (AES-256)", i+1, source, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(k)
		s.keys = append(s.keys, sealKey{id: hex.EncodeToString(sum[:4]), aead: aead})
	}
	if len(s.keys) == 0 {
		return nil, fmt.Errorf("store: no secret key in %s", source)
	}
	return s, nil
}

func (s *sealer) seal(objectID, plain string) (string, error) {
	k := s.keys[0]
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := k.aead.Seal(nonce, nonce, []byte(plain), []byte(objectID))
	return sealPrefix + k.id + ":" + base64.StdEncoding.EncodeToString(out), nil
}

func (s *sealer) open(objectID, stored string) (string, error) {
	rest, ok := strings.CutPrefix(stored, sealPrefix)
	id, data, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", errors.New("store: a stored secret is not in the encrypted format")
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return "", errors.New("store: a stored secret is corrupt")
	}
	for _, k := range s.keys {
		if k.id != id || len(raw) < k.aead.NonceSize() {
			continue
		}
		n := k.aead.NonceSize()
		plain, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(objectID))
		if err != nil {
			return "", errors.New("store: a stored secret does not decrypt with its key (corrupt, or moved to another object)")
		}
		return string(plain), nil
	}
	return "", fmt.Errorf("store: a stored secret was encrypted with key %s, which is not among the keys from %s", id, s.source)
}

// parseKeys reads comma-separated 32-byte keys in base64 or hex.
func parseKeys(v, source string) ([][]byte, error) {
	var keys [][]byte
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(part)
		if err != nil || len(k) != 32 {
			if h, herr := hex.DecodeString(part); herr == nil {
				k, err = h, nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("store: %s: a key is neither base64 nor hex", source)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// NewSecretKey returns a new random key, base64-encoded, for EDGEPLANE_SECRET_KEY.
func NewSecretKey() string {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// keyFilePath is where a SQLite store keeps its key when EDGEPLANE_SECRET_KEY is unset.
func keyFilePath(dbPath string) string { return dbPath + ".key" }

// errNoKeyFile is openSealer's answer for a SQLite database without keys configured and without
// its key file: OpenWith creates the file (newKeyFile) only once the database is known to hold no
// secret, since a new key would not decrypt them.
var errNoKeyFile = errors.New("store: no key file")

// openSealer finds the keys: Options.SecretKeys, else EDGEPLANE_SECRET_KEY, else (SQLite only) the
// key file next to the database (errNoKeyFile when there is none yet). PostgreSQL replicas must
// share a key, so they need one given explicitly.
func openSealer(dsn string, opts Options) (*sealer, error) {
	text, source, err := keysText(dsn, opts)
	if err != nil {
		return nil, err
	}
	keys, err := parseKeys(text, source)
	if err != nil {
		return nil, err
	}
	return newSealer(keys, source)
}

// keysText returns the keys a store on dsn uses, as the text that holds them, and where they come
// from (see openSealer).
func keysText(dsn string, opts Options) (text, source string, err error) {
	if opts.SecretKeys != "" {
		return opts.SecretKeys, "the configured secret keys", nil
	}
	if v := os.Getenv(SecretKeyEnv); v != "" {
		return v, SecretKeyEnv, nil
	}
	if IsPostgres(dsn) {
		return "", "", fmt.Errorf("store: PostgreSQL needs a secret key shared by every replica: set %s (generate one with: edgeplane secrets new-key)", SecretKeyEnv)
	}
	path := keyFilePath(strings.TrimPrefix(dsn, "sqlite:"))
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", path, errNoKeyFile
	}
	if err := checkKeyFile(path, err); err != nil {
		return "", "", err
	}
	return string(data), path, nil
}

// SecretKeys returns the keys that a store opened on dsn with opts encrypts and decrypts secrets
// with, as a key file holds them. A backup holds its secrets encrypted, never these keys:
// `export --key-file` writes them to a file of their own, which a restore elsewhere needs.
func SecretKeys(dsn string, opts Options) (string, error) {
	text, source, err := keysText(dsn, opts)
	if errors.Is(err, errNoKeyFile) {
		return "", fmt.Errorf("store: the key file %s does not exist", source)
	}
	if err != nil {
		return "", err
	}
	if _, err := parseKeys(text, source); err != nil {
		return "", err
	}
	return strings.TrimSpace(text), nil
}

// ReadKeyFile reads a file of secret keys (a database's key file, or one written by `export
// --key-file`) and returns its keys, checked, as text for Options.RestoreKeys. A file that others
// may read is refused, as a database's key file is: it opens every secret of a backup.
func ReadKeyFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err := checkKeyFile(path, err); err != nil {
		return "", err
	}
	keys, err := parseKeys(string(data), path)
	if err != nil {
		return "", err
	}
	if len(keys) == 0 {
		return "", fmt.Errorf("store: no secret key in %s", path)
	}
	for i, k := range keys {
		if len(k) != 32 {
			return "", fmt.Errorf("store: secret key %d from %s is %d bytes; want 32 (AES-256)", i+1, path, len(k))
		}
	}
	return strings.TrimSpace(string(data)), nil
}

// checkKeyFile checks the outcome err of reading the key file at path, and that the file is
// readable by its owner only.
func checkKeyFile(path string, err error) error {
	if err != nil {
		return fmt.Errorf("store: secret key file %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("store: secret key file %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	return nil
}

// keyFileSealer checks a key file read from path (its mode, its keys) and makes its sealer.
func keyFileSealer(path string, data []byte, err error) (*sealer, error) {
	if err := checkKeyFile(path, err); err != nil {
		return nil, err
	}
	keys, err := parseKeys(string(data), path)
	if err != nil {
		return nil, err
	}
	return newSealer(keys, path)
}

// withRestoreKeys adds the keys of Options.RestoreKeys to the sealer, after its own: they decrypt
// a backup's secrets, and never encrypt (the first key does).
func (s *sealer) withRestoreKeys(text string) error {
	keys, err := parseKeys(text, "the backup's key file")
	if err != nil {
		return err
	}
	extra, err := newSealer(keys, "the backup's key file")
	if err != nil {
		return err
	}
	s.keys = append(s.keys, extra.keys...)
	s.source += " and the backup's key file"
	return nil
}

// newKeyFile makes the key file of a SQLite database that has none, after checking that the
// database holds no secret: were it to, a new key would not decrypt them, every use of one would
// fail, and the missing file is reported instead with what to do.
func (s *Store) newKeyFile(ctx context.Context, dsn string) (*sealer, error) {
	path := keyFilePath(strings.TrimPrefix(dsn, "sqlite:"))
	n, ids, err := secretCount(ctx, s.r, s.d)
	if err != nil {
		return nil, s.classify(err)
	}
	if n > 0 {
		return nil, fmt.Errorf("store: %w: the database holds %d encrypted secrets (key ids %s) but its key file %s does not exist, "+
			"and a new key would not decrypt them, so none was made. Put the key file back (mode 600), or set %s to the key that encrypted them",
			ErrSecretsUndecryptable, n, strings.Join(ids, ", "), path, SecretKeyEnv)
	}
	data, err := createKeyFile(path)
	return keyFileSealer(path, data, err)
}

// createKeyFile writes a new key to path, or reads the one another process wrote first. The key
// is written to a private temporary file that is then hard-linked into place, so a concurrent
// reader never sees a partly written file.
func createKeyFile(path string) ([]byte, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".edgeplane-key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	data := []byte(NewSecretKey() + "\n")
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	} else if err != nil {
		return nil, err
	}
	return data, nil
}

// putSecret keeps the secret of a new object, encrypted, inside the create transaction.
func (s *Store) putSecret(ctx context.Context, tx *wtx, account, id, secret string) error {
	sealed, err := s.seal.seal(id, secret)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.d.rebind(secretIns), id, account, sealed)
	return s.classify(err)
}

// replaceSecret keeps a new secret of an existing object in place of any it had, inside the
// update's transaction: an HTTPS edge route's SAML request signing key, made when the module is
// first configured on the route.
func (s *Store) replaceSecret(ctx context.Context, tx *wtx, account, id, secret string) error {
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM secrets WHERE object_id = ?`), id); err != nil {
		return s.classify(err)
	}
	return s.putSecret(ctx, tx, account, id, secret)
}

// objectSecret reads and decrypts the secret kept with an object of account, outside any write
// (the data plane's snapshot); ok is false when the object keeps none.
func (s *Store) objectSecret(ctx context.Context, account, id string) (secret string, ok bool, err error) {
	var sealed string
	if err := s.r.QueryRowContext(ctx, s.d.rebind(secretGet), id, account).Scan(&sealed); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", false, nil
		}
		return "", false, s.classify(err)
	}
	secret, err = s.seal.open(id, sealed)
	return secret, err == nil, err
}

// Secret returns the secret kept with an object of the caller's account.
func (v *txView) Secret(id string) (string, error) {
	var data string
	if !storable(id) {
		return "", ep.NotFound()
	}
	err := v.tx.QueryRowContext(v.ctx, v.s.d.rebind(secretGet), id, v.account).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ep.NotFound()
	}
	if err != nil {
		return "", v.s.classify(err)
	}
	return v.s.seal.open(id, data)
}

// RotateSecrets re-encrypts every secret, of objects (in the secrets table and inside documents)
// and of the deployment (edgeplane's CA), with the first key, so older keys can be retired. Run
// it with EDGEPLANE_SECRET_KEY=NEW,OLD; it returns how many secrets it rewrote. Nothing is
// rewritten when any secret fails to decrypt.
func (s *Store) RotateSecrets(ctx context.Context) (int, error) {
	// The snapshot cache holds opened secrets read under the old sealing: it starts over.
	defer s.feed.snaps.reset()
	n := 0
	err := s.tryTxOnce(ctx, func(ctx context.Context, tx *wtx) error {
		var err error
		n, err = s.resealAll(ctx, tx) // the committer may run a function again (writer.go)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// resealAll re-encrypts every secret with the first key inside tx and returns how many it
// rewrote; it fails, rewriting nothing, when any secret does not decrypt.
func (s *Store) resealAll(ctx context.Context, tx *wtx) (int, error) {
	all, err := tableSecrets(ctx, tx)
	if err != nil {
		return 0, s.classify(err)
	}
	n := 0
	for _, r := range all {
		plain, err := s.seal.open(r.ad, r.sealed)
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w", r.table, r.key, err)
		}
		sealed, err := s.seal.seal(r.ad, plain)
		if err != nil {
			return 0, err
		}
		q := `UPDATE secrets SET data = ? WHERE object_id = ?`
		if r.table == "system_secrets" {
			q = `UPDATE system_secrets SET sealed = ? WHERE name = ?`
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(q), sealed, r.key); err != nil {
			return 0, s.classify(err)
		}
		n++
	}
	k, err := s.rewriteFields(ctx, tx, false)
	if err != nil {
		return 0, err
	}
	t, err := s.resealTunnelOpts(ctx, tx)
	return n + k + t, err
}

// resealTunnelOpts re-encrypts the options of live agent tunnels (agent_tunnels.opts: the modules
// a bind asked for, with their passwords and client secrets), which other replicas read to carry
// traffic to the tunnel. They are left out of the start-up check, because a row of a replica that
// died under an older key must not keep a new server from starting, but once the old key is gone
// a row it sealed could not be routed from another replica, so rotation covers them too.
func (s *Store) resealTunnelOpts(ctx context.Context, tx *wtx) (int, error) {
	type row struct{ id, sealed string }
	rows, err := tx.QueryContext(ctx, `SELECT id, opts FROM agent_tunnels WHERE opts <> '' ORDER BY id`)
	if err != nil {
		return 0, s.classify(err)
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.sealed); err != nil {
			rows.Close()
			return 0, s.classify(err)
		}
		all = append(all, r)
	}
	if err := rows.Close(); err != nil {
		return 0, s.classify(err)
	}
	for _, r := range all {
		plain, err := s.seal.open(tunnelAD(r.id), r.sealed)
		if err != nil {
			return 0, fmt.Errorf("agent_tunnels %s: %w", r.id, err)
		}
		sealed, err := s.seal.seal(tunnelAD(r.id), plain)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_tunnels SET opts = ? WHERE id = ?`), sealed, r.id); err != nil {
			return 0, s.classify(err)
		}
	}
	return len(all), nil
}

// SetSettings makes the deployment settings (service domains, CNAME zone) available to the rules
// of every later write, through ep.Op.Settings. Call it once after Open, before serving.
func (s *Store) SetSettings(settings ep.Settings) { s.settings.Store(&settings) }

// Settings returns the settings in force: those given to SetSettings, else the defaults.
func (s *Store) Settings() ep.Settings {
	if p := s.settings.Load(); p != nil {
		return *p
	}
	return ep.DefaultSettings()
}
