package edgeplane

import (
	"reflect"
	"sync"
)

// Secrets inside documents. Some modules hold a secret the data plane needs in the clear: the
// webhook_verification module's secret and the OAuth and OIDC modules' client secrets. Unlike
// private keys (Op.KeepSecret, kept in a table of their own), these are fields of the module's
// JSON, so a document type declares them once, here, as pointers into itself; the store, which
// knows nothing of modules, finds them through SecretsOf and seals them with AES-256-GCM before
// a document is written, opens them for the data plane, and redacts the hidden ones from API
// responses (docs/decisions.md, "Secrets inside documents").

// Secret is one secret string field of a document, as its type declares it.
type Secret struct {
	// Field names the secret within its document by its JSON path ("oauth.provider.github.client_secret").
	// The store binds the object's id and this name into the ciphertext, so a sealed value copied
	// to another field or another object does not open; never rename one.
	Field string
	// Value is the field's current value; "" means the field holds no secret.
	Value string
	// Set replaces the value: with its sealed form before a write, with the opened one after a
	// read, or with "" (which an optional field stores as null) to redact it.
	Set func(string)
	// Hidden secrets are write-only: the API never returns them, and responses show the field as
	// null (client secrets). Secrets that are not hidden are returned as given, as the
	// compatible API does, because clients compare them (webhook secrets).
	Hidden bool
}

// SecretHolder is implemented by documents and module response types that hold secrets. Secrets
// lists those set, in a fixed order; the Set functions write into the value Secrets was called
// on.
type SecretHolder interface {
	Secrets() []Secret
}

// SecretKeeper is implemented by module response types with hidden secrets. A client cannot
// send back a hidden secret it read (responses show null), so a PUT or PATCH that leaves one
// out keeps the stored one, provided it still names the same application. KeepSecrets runs after
// Build with the module as stored before the write (nil when there was none, its secrets opened)
// and fails, naming the field, when a secret the module needs is neither given nor kept.
type SecretKeeper interface {
	KeepSecrets(previous any) error
}

// SecretsOf returns the secrets set in doc, a document of collection res: those the document
// declares itself and those of its modules (found through the module table), each named with the
// module's field in front ("webhook_verification.secret").
func SecretsOf(res *Resource, doc Document) []Secret {
	var out []Secret
	if h, ok := doc.(SecretHolder); ok {
		out = append(out, h.Secrets()...)
	}
	for _, m := range ModulesOf(res) {
		if m.get == nil {
			continue
		}
		h, ok := m.Get(doc).(SecretHolder)
		if !ok {
			continue
		}
		for _, s := range h.Secrets() {
			s.Field = m.Name + "." + s.Field
			out = append(out, s)
		}
	}
	return out
}

var (
	secretHolderT = reflect.TypeFor[SecretHolder]()
	holdersOnce   sync.Once
	holders       map[*Resource]bool
)

// HoldsSecrets reports whether documents of res can hold secrets: its document type or one of
// its modules' response types is a SecretHolder. The store reads only such collections when it
// checks, rotates or counts secrets kept in documents.
func HoldsSecrets(res *Resource) bool {
	holdersOnce.Do(func() {
		holders = map[*Resource]bool{}
		for _, r := range Resources {
			if _, ok := r.New().(SecretHolder); ok {
				holders[r] = true
			}
		}
		for _, m := range Modules {
			if m.Response != nil && reflect.PointerTo(m.Response).Implements(secretHolderT) {
				holders[m.Parent] = true
			}
		}
	})
	return holders[res]
}

// SecretCollections lists the collections whose documents can hold secrets, in the order of the
// resource table.
func SecretCollections() []*Resource {
	var out []*Resource
	for _, r := range Resources {
		if HoldsSecrets(r) {
			out = append(out, r)
		}
	}
	return out
}

// stringSecret declares a string field holding a secret ("" is none).
func stringSecret(field string, p *string, hidden bool) []Secret {
	if *p == "" {
		return nil
	}
	return []Secret{{Field: field, Value: *p, Hidden: hidden, Set: func(v string) { *p = v }}}
}

// optionalSecret declares an optional string field holding a secret (nil or "" is none); Set("")
// stores null, so a redacted field shows as null.
func optionalSecret(field string, p **string, hidden bool) []Secret {
	if *p == nil || **p == "" {
		return nil
	}
	return []Secret{{Field: field, Value: **p, Hidden: hidden, Set: func(v string) {
		if v == "" {
			*p = nil
			return
		}
		*p = &v
	}}}
}
