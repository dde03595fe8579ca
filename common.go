package edgeplane

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on the text fields every object has (spec "Conventions", item 6).
const (
	MaxDescription = 255
	MaxMetadata    = 4096
)

// Ref points at another object. Only ID is stored; URI is filled in when the object is rendered,
// from the configured base URL and the id's prefix.
type Ref struct {
	ID  string `json:"id"`
	URI string `json:"uri"`
}

// NewRef returns a Ref to id.
func NewRef(id string) *Ref { return &Ref{ID: id} }

// Annotations are the description and metadata strings of an object.
type Annotations struct {
	Description string `json:"description"`
	Metadata    string `json:"metadata"`
}

// AnnotationFields are description and metadata in a request body. Nil means "not given" (or
// null), which on update leaves the value unchanged; "" clears it.
type AnnotationFields struct {
	Description *string `json:"description"`
	Metadata    *string `json:"metadata"`
}

// Validate checks the byte limits of the spec, and that description is one line: the server's
// decoder refuses other control characters in every string, but lets tab, line feed and carriage
// return through for multi-line text such as metadata.
func (a *AnnotationFields) Validate() error {
	if a.Description != nil {
		if err := maxBytes("description", *a.Description, MaxDescription); err != nil {
			return err
		}
		if i := strings.IndexAny(*a.Description, "\t\n\r"); i >= 0 {
			return Invalid(CodeInvalid, "description", "must be one line, without control characters (found U+%04X)", (*a.Description)[i])
		}
	}
	if a.Metadata != nil {
		return maxBytes("metadata", *a.Metadata, MaxMetadata)
	}
	return nil
}

// ApplyTo copies the given fields onto dst.
func (a *AnnotationFields) ApplyTo(dst *Annotations) {
	if a.Description != nil {
		dst.Description = *a.Description
	}
	if a.Metadata != nil {
		dst.Metadata = *a.Metadata
	}
}

func maxBytes(field, v string, n int) error {
	if len(v) > n {
		return Invalid(CodeInvalid, field, "must be at most %d bytes, got %d", n, len(v))
	}
	if !utf8.ValidString(v) {
		return Invalid(CodeInvalid, field, "must be valid UTF-8")
	}
	return nil
}

// ValidHostname reports whether s is a DNS hostname of at least two labels: labels of 1 to 63
// letters, digits and inner hyphens, 253 bytes in all. When wildcard is true a leading "*." label
// is allowed too; it counts toward the 253 bytes, as it does in DNS.
func ValidHostname(s string, wildcard bool) bool {
	if len(s) > 253 {
		return false
	}
	if wildcard {
		s = strings.TrimPrefix(s, "*.")
	}
	if len(s) == 0 {
		return false
	}
	labels := 0
	for label := range strings.SplitSeq(s, ".") {
		labels++
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return labels >= 2
}

// validPort reports whether s is a TCP port as an address writes it: 1 to 65535 in decimal
// digits, without a sign or leading zeros (strconv.Atoi alone would let "+443" through).
func validPort(s string) bool {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	n, _ := strconv.Atoi(s)
	return n <= 65535
}
