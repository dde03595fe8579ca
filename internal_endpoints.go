package edgeplane

import (
	"encoding/hex"
	"strconv"
	"strings"
)

// Internal endpoints are agent binds on a name ending in ".internal": they never serve the
// public listeners and are reached only by the forward-internal action of a traffic policy of
// the same account. Two accounts may each have an endpoint of the same internal URL; each
// account's policies reach its own.

// AgentCodeInternalBinding is ngrok's refusal of an endpoint with the internal binding whose
// URL does not end in ".internal" (or of a ".internal" URL with the public binding).
const AgentCodeInternalBinding = 9029

// InternalSuffix ends every internal endpoint's hostname.
const InternalSuffix = ".internal"

// IsInternalHost reports whether host names an internal endpoint.
func IsInternalHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return strings.HasSuffix(host, InternalSuffix) && len(host) > len(InternalSuffix)
}

// InternalEndpointKey is the name an internal endpoint is registered and recorded under: its
// hostname and port scoped to its account. It contains '@', which no hostname of a public
// request (Host header or TLS server name) can, so the public listeners never find it, and its
// part after the first dot (the zone a wildcard reservation would cover) is the account's own,
// so another account's name or reservation never meets it. The account id is hex-encoded:
// lookups lowercase names, and ids differing only in case must stay apart.
func InternalEndpointKey(account, host string, port int) string {
	return strings.ToLower(strings.TrimSuffix(host, ".")) + "@" + strconv.Itoa(port) + "@" + hex.EncodeToString([]byte(account))
}

// SplitInternalEndpointKey returns the hostname and port of an InternalEndpointKey; ok is false
// for any other name.
func SplitInternalEndpointKey(name string) (host string, port int, ok bool) {
	host, rest, found := strings.Cut(name, "@")
	if !found {
		return "", 0, false
	}
	p, _, found := strings.Cut(rest, "@")
	port, err := strconv.Atoi(p)
	if !found || err != nil || !IsInternalHost(host) {
		return "", 0, false
	}
	return host, port, true
}
