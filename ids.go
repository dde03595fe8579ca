package edgeplane

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"math/bits"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/ksuid"
)

// TimeFormat is the wire format of every timestamp: RFC 3339 in UTC with second precision, the
// precision of the KSUID inside every id, so created_at always equals the id's embedded time.
const TimeFormat = "2006-01-02T15:04:05Z"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// idGen hands out KSUIDs that are strictly increasing within this process, so that "newest first"
// (ORDER BY id DESC) is also creation order for objects created in the same second. Across
// replicas, ids are ordered by second only, as KSUIDs are.
var idGen struct {
	sync.Mutex
	last ksuid.KSUID
}

// NewKSUID returns a KSUID greater than every one this process returned before.
func NewKSUID() ksuid.KSUID {
	k := ksuid.New()
	idGen.Lock()
	defer idGen.Unlock()
	if ksuid.Compare(k, idGen.last) <= 0 {
		k = idGen.last.Next()
	}
	idGen.last = k
	return k
}

// NewID returns a new id "<prefix>_<KSUID>" and the time embedded in it.
func NewID(prefix string) (string, time.Time) {
	k := NewKSUID()
	return string(appendKSUID(append(make([]byte, 0, len(prefix)+1+27), prefix+"_"...), k)), k.Time()
}

// NewOperationID returns the id of one API operation (the Ngrok-Operation-Id header and the
// operation_id of error bodies and log lines): "op_" and a KSUID of the current time. Unlike
// object ids it needs neither ordering nor unpredictability, only to be unique, so its payload
// comes from the runtime's fast per-thread generator instead of the operating system's (a system
// call on every request otherwise).
func NewOperationID() string {
	var payload [16]byte // a KSUID payload
	binary.LittleEndian.PutUint64(payload[:8], mrand.Uint64())
	binary.LittleEndian.PutUint64(payload[8:], mrand.Uint64())
	k, err := ksuid.FromParts(time.Now(), payload[:])
	if err != nil { // only for a payload of the wrong size
		panic(err)
	}
	var b [len("op_") + 27]byte
	return string(appendKSUID(append(b[:0], "op_"...), k))
}

// base62 is the KSUID alphabet, in ASCII order.
const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// base62Pairs spells every number below 62*62 in two base62 digits: 3,844 pairs.
var base62Pairs = func() string {
	b := make([]byte, 0, 2*62*62)
	for i := range 62 * 62 {
		b = append(b, base62[i/62], base62[i%62])
	}
	return string(b)
}()

// appendKSUID appends k's string form, as k.String() makes it: its 160 bits in 27 base62 digits.
// ksuid's encoder divides the number by 62 a digit at a time over five 32-bit parts, which was a
// few percent of the CPU of an API request (one operation id each); here it is divided by 62^10
// over three 64-bit parts, and each remainder of 10 digits spelled out on its own, two digits at
// a time from a table.
func appendKSUID(dst []byte, k ksuid.KSUID) []byte {
	const chunk = 839299365868340224 // 62^10
	limbs := [3]uint64{uint64(binary.BigEndian.Uint32(k[:4])), binary.BigEndian.Uint64(k[4:12]), binary.BigEndian.Uint64(k[12:])}
	var out [27]byte
	for end := 27; end > 0; end -= 10 {
		var rem uint64
		for i := range limbs {
			limbs[i], rem = bits.Div64(rem, limbs[i], chunk)
		}
		i := end - 1
		for ; i >= max(end-10, 0)+1; i -= 2 { // two digits at a time
			pair := rem % (62 * 62)
			out[i], out[i-1] = base62Pairs[2*pair+1], base62Pairs[2*pair]
			rem /= 62 * 62
		}
		if i >= 0 && i == max(end-10, 0) { // the odd digit of the last 7
			out[i] = base62[rem%62]
		}
	}
	return append(dst, out[:]...)
}

// ValidID reports whether s has the shape of an id with the given prefix: the prefix, an
// underscore and a 27-character KSUID. It does not say that the object exists.
func ValidID(prefix, s string) bool {
	// The prefix and '_' are compared in place: building prefix+"_" cost every API request a
	// concatenation, since the Authorization header is checked for an API key's id.
	if len(s) != len(prefix)+1+27 || s[:len(prefix)] != prefix || s[len(prefix)] != '_' {
		return false
	}
	rest := s[len(prefix)+1:]
	// ksuid.Parse does not look at every character (it took "\xff" in place of a digit), so the
	// alphabet is checked here: an id that is not base62 could not have been issued.
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return rest <= maxKSUID
}

// Token is a bearer secret handed to a caller once. It is "<selector>_<secret>": the selector is
// the KSUID of the object the token belongs to and finds its row with one indexed lookup; only a
// SHA-256 hash of the secret is stored, and it is compared in constant time.
type Token struct {
	Plain    string
	Selector string
	Hash     []byte
}

// NewToken makes a token for the object whose id has the given KSUID string.
func NewToken(selector string) Token {
	secret := rand.Text() + rand.Text() // 2 x 128 bits from crypto/rand
	return Token{Plain: selector + "_" + secret, Selector: selector, Hash: HashSecret(secret)}
}

// HashSecret is the stored form of a token's secret part.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// ParseToken splits a presented token into selector and secret; ok is false when it does not
// have the shape of a token edgeplane issued.
func ParseToken(s string) (selector, secret string, ok bool) {
	selector, secret, ok = strings.Cut(s, "_")
	if !ok || len(selector) != 27 || len(secret) != 52 {
		return "", "", false
	}
	if !parsesAsKSUID(selector) {
		return "", "", false
	}
	class := isBase32
	for i := 0; i < len(secret); i++ {
		class &= alphabets[secret[i]]
	}
	if class == 0 {
		return "", "", false
	}
	return selector, secret, true
}

// The alphabets of tokens, as bits of alphabets: base62 (a KSUID's digits) and the base32 of a
// token's secret (A-Z, 2-7). A token's every byte is looked up in a table, with no branch per
// byte: about half of what comparing each with the ranges cost.
const (
	isBase62 byte = 1 << iota
	isBase32
)

var alphabets = func() (t [256]byte) {
	for c := range 256 {
		if c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' {
			t[c] |= isBase62
		}
		if c >= 'A' && c <= 'Z' || c >= '2' && c <= '7' {
			t[c] |= isBase32
		}
	}
	return t
}()

// maxKSUID is the largest KSUID's string: a 27-character base62 string above it overflows the
// 160 bits of a KSUID.
var maxKSUID = ksuid.Max.String()

// parsesAsKSUID reports whether ksuid.Parse accepts s, a string of 27 bytes, without decoding
// it, which took a few percent of the CPU of an API request: the base62 alphabet is in ASCII
// order, so a string of its digits is no larger than the largest KSUID exactly when it sorts no
// later. A string with other bytes is left to ksuid.Parse.
func parsesAsKSUID(s string) bool {
	class := isBase62
	for i := 0; i < len(s); i++ {
		class &= alphabets[s[i]]
	}
	if class == 0 {
		_, err := ksuid.Parse(s)
		return err == nil
	}
	return s <= maxKSUID
}

// SecretMatches compares a presented secret with a stored hash in constant time.
func SecretMatches(secret string, hash []byte) bool {
	// The secret is hashed from a copy on the stack: converting it with []byte (it is longer
	// than the 32 bytes Go converts on the stack) and returning the sum as a slice were two
	// allocations of every authenticated request.
	var b [64]byte
	var sum [sha256.Size]byte
	if len(secret) <= len(b) {
		sum = sha256.Sum256(b[:copy(b[:], secret)])
	} else {
		sum = sha256.Sum256([]byte(secret))
	}
	return subtle.ConstantTimeCompare(sum[:], hash) == 1
}
