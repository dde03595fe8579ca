package edgeplane

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Error is the one error type every layer of edgeplane returns for a failure the caller should
// see. It maps one to one onto the wire error body of the compatible API:
// {"error_code": "ERR_NGROK_<Code>", "status_code": Status, "msg": Msg, "details": {...}}.
// Anything that is not an *Error reaching the HTTP layer is an internal error and is rendered as a
// 500 without its text, so internals never leak.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the number n of the wire error code ERR_NGROK_<n>.
	Code int
	// Msg is a human-readable sentence naming the offending field or object.
	Msg string
	// Field names the request field at fault, when there is one; it is reported in details.
	Field string
}

// Error implements the error interface.
func (e *Error) Error() string { return e.Msg }

// ErrorCode is the wire error code, for example "ERR_NGROK_215".
func (e *Error) ErrorCode() string { return "ERR_NGROK_" + strconv.Itoa(e.Code) }

// Wire error codes. The numbers are those of the compatible API where it has one; the few that
// edgeplane had to add are marked and listed in docs/errors.md.
const (
	CodeAuthMissing        = 200  // no Authorization header
	CodeAuthMalformed      = 201  // Authorization header is not "Bearer <token>"
	CodeAuthUnknown        = 203  // token unknown, or its key deleted
	CodeAuthInactive       = 204  // edgeplane: the key's owning bot user is inactive
	CodeAuthKeyID          = 208  // an API key id was sent instead of its token
	CodeBodyTooLarge       = 212  // edgeplane: request body over the limit
	CodeBadJSON            = 213  // malformed JSON
	CodeUnknownField       = 214  // unknown field in a body
	CodeInvalid            = 215  // a value of the wrong type, out of range or otherwise invalid
	CodeBadVersion         = 217  // version header has an unsupported value
	CodeNoVersion          = 218  // version header missing
	CodeRateLimited        = 226  // too many requests
	CodeBadLimit           = 233  // paging limit outside 1..100
	CodeNotFound           = 404  // edgeplane: resource or path not found
	CodeMethodNotAllowed   = 405  // edgeplane: method not allowed on the path
	CodeBadACLRule         = 600  // credential ACL rule invalid
	CodeOwnerForbidden     = 635  // only admins may set another owner
	CodeBadCIDR            = 1406 // CIDR does not parse
	CodeBadAction          = 1422 // IP policy rule action not allow/deny
	CodeIPPolicyMissing    = 7007 // referenced IP policy does not exist
	CodeUnavailable        = 9000 // edgeplane: the database is unreachable (503)
	CodeInternal           = 10000
	defaultNotFoundMessage = "Resource not found"
)

// Wire error codes of reserved domains, certificates and SSH certificate authorities.
const (
	CodeDomainReserved          = 413  // domain already reserved by this account (409)
	CodeDomainReservedElsewhere = 414  // domain already reserved by another account (409)
	CodeCertAndPolicy           = 434  // certificate_id and certificate_management_policy together
	CodeDomainInUse             = 446  // reserved domain still used by an edge's hostports (409)
	CodeDomainOnline            = 430  // another account's agent is online on the domain (409)
	CodeCertificateInUse        = 449  // edgeplane: TLS certificate still attached to a reserved domain (409)
	CodeNotCA                   = 1913 // ca_pem does not parse or is not a CA certificate
	CodeSSHCAInUse              = 1964 // SSH certificate authority still has certificates (409)
)

// Errorf returns an *Error with a formatted message.
func Errorf(status, code int, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Invalid returns the 400 error for a field whose value is wrong; code says which rule failed
// (CodeInvalid when no more specific code exists). The message always starts with the field name
// so a user can tell at once what to fix.
func Invalid(code int, field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Field: field,
		Msg: field + ": " + fmt.Sprintf(format, args...)}
}

// NotFound is the error for an object that does not exist or belongs to another account; both
// look the same to the caller so ids of other accounts leak nothing.
func NotFound() *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Msg: defaultNotFoundMessage}
}

// Unavailable is the error of a request the database could not serve in time: 503
// ERR_NGROK_9000, which tells clients to try again.
func Unavailable() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
		Msg: "The database is unavailable; try again shortly."}
}

// IsNotFound reports whether err is the not-found error.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}
