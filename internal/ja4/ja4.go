// Package ja4 computes the JA4 fingerprint of a TLS client from its ClientHello, as FoxIO's
// published specification defines it (technical_details/JA4.md of github.com/FoxIO-LLC/ja4):
//
//	t13d1516h2_8daaf6152771_e5627efa2ab1
//
// the transport, the TLS version, whether a server name was asked for, the counts of cipher
// suites and extensions and the first ALPN protocol's first and last characters; then a
// truncated SHA-256 of the sorted cipher suites; then one of the sorted extensions (the server
// name and ALPN left out) followed by the signature algorithms in the client's order. GREASE
// values are left out everywhere.
//
// It is written here because no Go module computing JA4 is available to this project; JA4 is a
// format over fields crypto/tls already parses (tls.ClientHelloInfo), with published vectors,
// not cryptography or a protocol. Only JA4 (the TLS client fingerprint) is computed, not the
// rest of the JA4+ family.
package ja4

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"slices"
)

// Extension ids JA4 treats apart: the server name and ALPN are left out of the extension hash
// (the first part already says whether they were sent).
const (
	extServerName = 0x0000
	extALPN       = 0x0010
)

// empty is the hash part of an empty list: the specification writes zeros rather than the
// hash of nothing, so that a reader sees there was nothing.
const empty = "000000000000"

// Fingerprint is the JA4 fingerprint of a ClientHello received over TCP (crypto/tls's server
// reads nothing else). The version is the highest of the supported_versions extension; without
// the extension crypto/tls gives the versions up to the hello's own, so its greatest is the
// hello's version, except below TLS 1.0, which crypto/tls does not list ("00").
func Fingerprint(h *tls.ClientHelloInfo) string {
	b := make([]byte, 0, 36)
	b = append(b, 't')
	b = append(b, version(h.SupportedVersions)...)
	if slices.Contains(h.Extensions, extServerName) {
		b = append(b, 'd')
	} else {
		b = append(b, 'i')
	}
	b = appendCount(b, h.CipherSuites)
	b = appendCount(b, h.Extensions)
	b = appendALPN(b, h.SupportedProtos)
	b = append(b, '_')
	b = append(b, hashList(sortedWithout(h.CipherSuites), nil)...)
	b = append(b, '_')
	exts := sortedWithout(h.Extensions, extServerName, extALPN)
	var sigs []uint16
	for _, s := range h.SignatureSchemes {
		if !grease(uint16(s)) {
			sigs = append(sigs, uint16(s))
		}
	}
	b = append(b, hashList(exts, sigs)...)
	return string(b)
}

// grease reports whether v is one of the reserved GREASE values (RFC 8701): 0x0a0a, 0x1a1a, …,
// 0xfafa.
func grease(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

// version is the two characters of the highest version offered, GREASE left out.
func version(vs []uint16) string {
	var hi uint16
	for _, v := range vs {
		if !grease(v) && v > hi {
			hi = v
		}
	}
	switch hi {
	case 0x0304:
		return "13"
	case 0x0303:
		return "12"
	case 0x0302:
		return "11"
	case 0x0301:
		return "10"
	case 0x0300:
		return "s3"
	case 0x0002:
		return "s2"
	case 0xfeff:
		return "d1"
	case 0xfefd:
		return "d2"
	case 0xfefc:
		return "d3"
	}
	return "00"
}

// appendCount appends the number of values that are not GREASE as two digits, at most 99.
func appendCount(b []byte, vs []uint16) []byte {
	n := 0
	for _, v := range vs {
		if !grease(v) {
			n++
		}
	}
	n = min(n, 99)
	return append(b, byte('0'+n/10), byte('0'+n%10))
}

// appendALPN appends the first and last characters of the first ALPN protocol: the bytes
// themselves when both are ASCII letters or digits, else the first and last characters of the
// protocol's hex form; "00" when there is no protocol or it is empty.
func appendALPN(b []byte, protos []string) []byte {
	if len(protos) == 0 || protos[0] == "" {
		return append(b, '0', '0')
	}
	p := protos[0]
	first, last := p[0], p[len(p)-1]
	if alnum(first) && alnum(last) {
		return append(b, first, last)
	}
	const digits = "0123456789abcdef"
	return append(b, digits[first>>4], digits[last&0x0f])
}

func alnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// sortedWithout is vs without GREASE values and without the values leave, sorted.
func sortedWithout(vs []uint16, leave ...uint16) []uint16 {
	out := make([]uint16, 0, len(vs))
	for _, v := range vs {
		if !grease(v) && !slices.Contains(leave, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// hashList is the first 12 hex characters of the SHA-256 of list as comma-separated 4-digit
// lower-case hex, followed, when tail is not empty, by an underscore and tail the same way;
// zeros when list is empty.
func hashList(list, tail []uint16) string {
	if len(list) == 0 {
		return empty
	}
	raw := appendHexList(make([]byte, 0, 5*(len(list)+len(tail))), list)
	if len(tail) > 0 {
		raw = append(raw, '_')
		raw = appendHexList(raw, tail)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:6])
}

// appendHexList appends vs as comma-separated 4-digit lower-case hex.
func appendHexList(b []byte, vs []uint16) []byte {
	const digits = "0123456789abcdef"
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, digits[v>>12], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf])
	}
	return b
}
