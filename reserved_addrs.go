package edgeplane

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
)

// ClaimAddr is the claim namespace of reserved TCP addresses: an address belongs to one account.
const ClaimAddr = "addr"

// CodeAddrInUse is the 409 for deleting a reserved address that a TCP edge still serves
// (edgeplane's own, next to 446 for domains).
const CodeAddrInUse = 447

// CodeNoFreeAddr is the 409 when every port of the configured range is reserved (edgeplane's own).
const CodeNoFreeAddr = 448

// ReservedAddr is a TCP address held by the account (schema "ReservedAddr"). The server assigns
// it from the configured host and port range; deleting it frees the address.
type ReservedAddr struct {
	Meta
	Annotations
	Addr   string `json:"addr"`
	Region string `json:"region"`
}

// Claims makes the address belong to one account.
func (a *ReservedAddr) Claims() []Claim { return []Claim{{Namespace: ClaimAddr, Value: a.Addr}} }

// Conflict cannot happen through the API (the server picks free addresses, and a race makes the
// create start over); it is reported as a conflict on addr all the same.
func (a *ReservedAddr) Conflict(c Claim, _ bool) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeNoFreeAddr, Field: "addr", Msg: "addr: " + c.Value + " is taken"}
}

func addrInUse(id string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeAddrInUse,
		Msg: "Reserved address " + id + " is still served by a TCP edge; remove it from the edge's hostports first."}
}

// ReservedAddrCreate is the body of POST /reserved_addrs.
type ReservedAddrCreate struct {
	Echo
	AnnotationFields
	Region *string `json:"region"`
}

// Validate checks the deprecated region against the spec's values.
func (c *ReservedAddrCreate) Validate() error {
	if err := c.AnnotationFields.Validate(); err != nil {
		return err
	}
	if c.Region != nil && *c.Region != "" && !slices.Contains(DomainRegions, *c.Region) {
		return Invalid(CodeInvalid, "region", "must be one of au, eu, ap, us, jp, in, sa, got %q", *c.Region)
	}
	return nil
}

// Create picks a free port of the configured range at random.
func (c *ReservedAddrCreate) Create(op *Op) (Document, error) {
	s := op.Settings.effective()
	lo, hi := s.TCPPortMin, s.TCPPortMax
	span := hi - lo + 1
	tries := min(span, 64)
	for range tries {
		addr := s.TCPHost + ":" + strconv.Itoa(lo+rand.IntN(span))
		if _, _, err := op.Tx.Claimed(ClaimAddr, addr); err == nil {
			continue // taken, by this account or another
		} else if !IsNotFound(err) {
			return nil, err
		}
		// A random-port tcp bind of another account is online on it: reserving it would hand
		// that endpoint's port to this account.
		if online, err := op.Tx.OnlineElsewhere(addr); err != nil {
			return nil, err
		} else if online {
			continue
		}
		a := &ReservedAddr{Addr: addr}
		if c.Region != nil {
			a.Region = *c.Region
		}
		c.ApplyTo(&a.Annotations)
		return a, nil
	}
	return nil, &Error{Status: http.StatusConflict, Code: CodeNoFreeAddr,
		Msg: "No free TCP address: the configured port range " + strconv.Itoa(lo) + "-" + strconv.Itoa(hi) + " is (nearly) all reserved."}
}

// ReservedAddrUpdate is the body of PATCH /reserved_addrs/{id}.
type ReservedAddrUpdate struct {
	Echo
	AnnotationFields
}

// Apply changes description and metadata.
func (u *ReservedAddrUpdate) Apply(op *Op, doc Document) error {
	u.ApplyTo(&doc.(*ReservedAddr).Annotations)
	return nil
}
