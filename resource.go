package edgeplane

import (
	"context"
	"net/http"
	"time"
)

// Ops is the set of operations a collection serves; the HTTP layer registers a route for each.
type Ops uint8

// The operations of a collection.
const (
	OpCreate Ops = 1 << iota
	OpGet
	OpList
	OpUpdate
	OpDelete
	// AllOps is create, get, list, update and delete: what almost every collection serves.
	AllOps = OpCreate | OpGet | OpList | OpUpdate | OpDelete
)

// Has reports whether o includes op.
func (o Ops) Has(op Ops) bool { return o&op != 0 }

// Resource is one entry of the resource table: everything the generic store and HTTP code need to
// serve a collection. Adding a collection is one Resource plus its document and request types.
type Resource struct {
	// Kind is the stable name of the collection in the database and in logs ("ip_policy_rule").
	// Never rename it: stored rows carry it.
	Kind string
	// Path is the collection path, with "{edge_id}"-style segments when Parent is set.
	Path string
	// ListKey is the key of the array in a list response ("keys" for API keys).
	ListKey string
	// Prefix is the id prefix without the underscore ("ipr").
	Prefix string
	// OldPrefix is a prefix the collection's ids had before (weighted backends were "bkdwt"):
	// stored ids were migrated to Prefix, and an id with the old prefix given in a path or a
	// cursor still names the object (see CanonicalID). Empty for most collections.
	OldPrefix string
	// Parent is the collection this one is nested under in URLs, or nil. Objects of a nested
	// collection are reached only through their parent, and are deleted with it.
	Parent *Resource
	// Ops says which operations are served.
	Ops Ops
	// New returns an empty document to decode a stored object into.
	New func() Document
	// NewCreate and NewUpdate return empty request bodies for POST and PATCH.
	NewCreate func() Creator
	NewUpdate func() Updater
	// InUse is the error returned when an object of this collection cannot be deleted because
	// another object references it with RefRestrict. Nil means nothing restricts deletes.
	InUse func(id string) *Error
	// OnDelete runs inside the delete transaction, for side effects outside the object itself.
	OnDelete func(op *Op, doc Document) error
	// Embeds is the child collection whose objects this collection's documents show (see
	// Embedder), or nil.
	Embeds *Resource
	// Actions are the commands POST {Path}/{id}/{action} sends to a live object (an agent
	// session's restart, stop and update); only live collections have them.
	Actions []string
}

// CanonicalID returns id with the collection's current prefix when it has the shape of an id
// with OldPrefix (the KSUID after the prefix was kept by the migration, so it names the same
// object), and id unchanged otherwise.
func (r *Resource) CanonicalID(id string) string {
	if r.OldPrefix != "" && ValidID(r.OldPrefix, id) {
		return r.Prefix + id[len(r.OldPrefix):]
	}
	return id
}

// Document is implemented by every stored object, through its embedded Meta.
type Document interface {
	Base() *Meta
}

// Meta holds the fields every object has. Embedding it makes a type a Document.
type Meta struct {
	ID        string `json:"id"`
	URI       string `json:"uri"`
	CreatedAt string `json:"created_at"`
}

// Base returns the object's common fields.
func (m *Meta) Base() *Meta { return m }

// Creator is a decoded create (POST) body. Validate checks the body alone, without the store;
// Create builds the new document, consulting the store through op where rules need it.
type Creator interface {
	Validate() error
	Create(op *Op) (Document, error)
}

// Updater is a decoded update (PATCH) body. Absent and null fields are nil and leave the
// document unchanged. Apply runs inside the update transaction on the current document and may
// run more than once if a concurrent writer wins the compare-and-swap.
type Updater interface {
	Validate() error
	Apply(op *Op, doc Document) error
}

// Echo carries the id and edge_id that some clients copy into request bodies. Every request type
// embeds it; the HTTP layer checks that the values equal the path and otherwise ignores them.
type Echo struct {
	EchoID     *string `json:"id"`
	EchoEdgeID *string `json:"edge_id"`
}

// Echoed returns the echoed values.
func (e *Echo) Echoed() (id, edgeID *string) { return e.EchoID, e.EchoEdgeID }

// Echoer is implemented by request types that embed Echo.
type Echoer interface {
	Echoed() (id, edgeID *string)
}

// RefMode says what deleting a referenced object does to the objects that reference it.
type RefMode int

const (
	// RefRestrict refuses the delete while the reference exists (the target's InUse error).
	RefRestrict RefMode = iota + 1
	// RefCascade deletes the referencing object together with the target.
	RefCascade
)

// Reference is an edge from a document to another object that the store must enforce. Plain
// references that survive their target's deletion (a module keeping the Ref of a deleted IP
// policy) are not declared at all.
type Reference struct {
	// To is the id of the referenced object.
	To string
	// ToClaim, when set instead of To, refers to whichever object of the caller's account holds
	// the claim (the reserved domain behind an edge's hostport); none holding it is no reference.
	// It keeps references a pure function of the stored document.
	ToClaim *Claim
	Mode    RefMode
}

// Referrer is implemented by documents with enforced references.
type Referrer interface {
	References() []Reference
}

// Claim is a value that must be unique across all accounts within its namespace (a domain name,
// a hostport). The store takes the claims of a document in the same transaction as the write.
type Claim struct {
	Namespace string
	Value     string
}

// Claimer is implemented by documents that hold globally unique values. Conflict builds the error
// for a value already claimed, by this account (sameAccount) or by another.
type Claimer interface {
	Claims() []Claim
	Conflict(c Claim, sameAccount bool) *Error
}

// SerialUpdater is implemented by documents whose update rules decide by reading a chain of other
// objects of the account (the cycle check of failover and weighted backends: each update reads
// the backends its new children lead to), which the row lock on the object being written does
// not cover. Two such updates running side by side on PostgreSQL could each pass its check
// against the other's old state and together close a cycle; the store therefore runs the updates
// of all SerialUpdater documents of one account one at a time. SQLite has one writer anyway.
type SerialUpdater interface {
	SerialUpdates()
}

// Embedder is implemented by documents that show the objects of a child collection inside them
// (an HTTPS edge shows its routes). The store loads the children, oldest first, whenever it
// returns such a document; StoredForm is what is written, without them.
type Embedder interface {
	SetChildren(children []Document)
	Children() []Document
	StoredForm() Document
}

// Child is implemented by documents that belong to a parent object: they are deleted with it.
type Child interface {
	ParentID() string
}

// TokenHolder is implemented by documents that carry a token shown once, in the create response.
type TokenHolder interface {
	SetToken(plain string)
}

// Role is what a principal may do in its account.
type Role string

// Roles of principals.
const (
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
	RoleBot    Role = "bot"
)

// Principal is a user (usr_) or bot user (bot_) that owns API keys and credentials.
type Principal struct {
	ID        string
	AccountID string
	Role      Role
	Active    bool
}

// Caller is the authenticated principal of a request.
type Caller struct {
	AccountID string
	Principal Principal
	KeyID     string
}

// Tx is the store as validation rules see it inside a write transaction; every lookup is
// confined to the caller's account.
type Tx interface {
	// Get returns the object of collection res with the id, or the not-found error.
	Get(res *Resource, id string) (Document, error)
	// Exists reports whether the account has an object of collection res with the id. It is
	// what a rule that only checks an object is there asks: nothing is decoded for it.
	Exists(res *Resource, id string) (bool, error)
	// Principal returns the user or bot user with the id, or the not-found error.
	Principal(id string) (Principal, error)
	// PutPrincipal creates or replaces a principal of the caller's account.
	PutPrincipal(p Principal) error
	// DeletePrincipal removes a principal and, through the database, its tokens.
	DeletePrincipal(id string) error
	// Claimed returns the object holding a claim and whether it is of the caller's account, or
	// the not-found error when nothing holds it.
	Claimed(namespace, value string) (objectID string, mine bool, err error)
	// ClaimedExclusive is Claimed, but it also locks the object holding the claim against every
	// other writer until the transaction ends, whatever its account: for a write that changes
	// what the claim grants to writes relying on it (those share-lock the same object through
	// Claimed, so one of the two waits for the other's commit and then sees it).
	ClaimedExclusive(namespace, value string) (objectID string, mine bool, err error)
	// OnlineElsewhere reports whether an agent of another account is online, on any replica, on
	// name (a hostname or a TCP address host:port), or, for a wildcard "*.zone", on a name
	// directly under zone that no exact reservation covers. It locks the name until the
	// transaction ends, so that a bind of it racing on another replica is either seen here or
	// sees this write.
	OnlineElsewhere(name string) (bool, error)
	// Secret returns the secret kept with the object (see Op.KeepSecret), or the not-found error
	// when the object is not of the caller's account or keeps none. A CA's rules read its private
	// key this way to sign; nothing else ever sees it.
	Secret(id string) (string, error)
}

// Op is the context of one write: who is calling, the transaction, and the object's id.
type Op struct {
	Ctx    context.Context
	Caller Caller
	Tx     Tx
	// ID and Created are those of the object being written; for a create they are already
	// assigned when Create runs, so documents can derive fields from them.
	ID      string
	Created time.Time
	// ParentID is the parent named in the path of a nested collection, or "".
	ParentID string
	// Token is set by IssueToken: the store saves its hash and the response shows it once.
	Token      *Token
	TokenOwner string
	// Secret is set by KeepSecret: the store keeps it beside the new object, never inside its
	// document, so no response can show it.
	Secret string
	// Settings are the deployment settings in force (service domains, CNAME zone).
	Settings Settings
}

// KeepSecret hands the store a secret of the object being created, such as a private key. The
// store saves it outside the object's JSON document, in the one place where secrets live (so it
// can be encrypted at rest there), and rules read it back only through Tx.Secret.
func (op *Op) KeepSecret(secret string) { op.Secret = secret }

// IssueToken makes the one token of the object being created, owned by ownerID, and returns its
// plain text for the create response.
func (op *Op) IssueToken(ownerID string) string {
	t := NewToken(op.ID[len(op.ID)-27:])
	op.Token, op.TokenOwner = &t, ownerID
	return t.Plain
}

// Owner resolves the owner_id of a new API key or credential: the caller by default; another
// principal of the account only when the caller is an admin.
func (op *Op) Owner(requested *string) (string, error) {
	if requested == nil || *requested == "" || *requested == op.Caller.Principal.ID {
		return op.Caller.Principal.ID, nil
	}
	if op.Caller.Principal.Role != RoleAdmin {
		return "", &Error{Status: http.StatusForbidden, Code: CodeOwnerForbidden, Field: "owner_id",
			Msg: "owner_id: only an admin may create a key or credential owned by another user or bot"}
	}
	if _, err := op.Tx.Principal(*requested); err != nil {
		if IsNotFound(err) {
			return "", Invalid(CodeInvalid, "owner_id", "no user or bot user %q in this account", *requested)
		}
		return "", err
	}
	return *requested, nil
}
