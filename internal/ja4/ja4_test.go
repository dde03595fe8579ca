package ja4

import (
	"bufio"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
)

// specHello is the ClientHello of the specification's example (technical_details/JA4.md, its
// "JA4_ro" line: the values in the client's order), with GREASE values added where a browser
// puts them, which the fingerprint must leave out.
func specHello() *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{
		SupportedVersions: []uint16{0x3a3a, 0x0304, 0x0303},
		CipherSuites: []uint16{0x8a8a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013,
			0xc014, 0x009c, 0x009d, 0x002f, 0x0035},
		Extensions: []uint16{0x2a2a, 0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023,
			0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015, 0xbaba},
		SignatureSchemes: []tls.SignatureScheme{0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601},
		SupportedProtos:  []string{"h2", "http/1.1"},
	}
}

// TestSpecificationExample: the specification's worked example, whose hashes it gives.
func TestSpecificationExample(t *testing.T) {
	if got := Fingerprint(specHello()); got != "t13d1516h2_8daaf6152771_e5627efa2ab1" {
		t.Errorf("the specification's example: %s", got)
	}
	// Without signature algorithms the extension list is hashed alone, without an underscore.
	h := specHello()
	h.SignatureSchemes = []tls.SignatureScheme{0x1a1a} // GREASE only: none
	if got := Fingerprint(h); !strings.HasSuffix(got, "_6d807ffa2a79") {
		t.Errorf("without signature algorithms: %s, want the specification's 6d807ffa2a79", got)
	}
}

// TestParts: the first part's rules, each from the specification.
func TestParts(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*tls.ClientHelloInfo)
		want   string // the fingerprint's first part, or a whole one
	}{
		{"no server name", func(h *tls.ClientHelloInfo) { h.Extensions = h.Extensions[3:] }, "t13i1514h2"},
		{"TLS 1.2 without supported_versions (crypto/tls extrapolates)", func(h *tls.ClientHelloInfo) {
			h.SupportedVersions = []uint16{0x0303, 0x0302, 0x0301}
		}, "t12d1516h2"},
		{"TLS 1.0", func(h *tls.ClientHelloInfo) { h.SupportedVersions = []uint16{0x0301} }, "t10d1516h2"},
		{"an unknown version", func(h *tls.ClientHelloInfo) { h.SupportedVersions = []uint16{0x7f1c} }, "t00d1516h2"},
		{"no version", func(h *tls.ClientHelloInfo) { h.SupportedVersions = nil }, "t00d1516h2"},
		{"no ALPN", func(h *tls.ClientHelloInfo) { h.SupportedProtos = nil }, "t13d151600"},
		{"http/1.1 first", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"http/1.1", "h2"} }, "t13d1516h1"},
		{"a one-character protocol", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"x"} }, "t13d1516xx"},
		{"an empty protocol", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{""} }, "t13d151600"},
		{"more than 99 cipher suites", func(h *tls.ClientHelloInfo) {
			for i := range 120 {
				h.CipherSuites = append(h.CipherSuites, uint16(0x1000+i))
			}
		}, "t13d9916h2"},
		{"more than 99 extensions", func(h *tls.ClientHelloInfo) {
			for i := range 120 {
				h.Extensions = append(h.Extensions, uint16(0x2000+i))
			}
		}, "t13d1599h2"},
		{"no cipher suites nor extensions", func(h *tls.ClientHelloInfo) {
			h.CipherSuites, h.Extensions = []uint16{0x0a0a}, []uint16{0x0000, 0x0010}
		}, "t13d0002h2_000000000000_000000000000"},
	} {
		h := specHello()
		c.change(h)
		if got := Fingerprint(h); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %s, want %s…", c.name, got, c.want)
		}
	}
}

// TestALPN: the specification's examples of a first protocol whose first or last byte is not
// an ASCII letter or digit: the first and last characters of its hex form instead.
func TestALPN(t *testing.T) {
	for in, want := range map[string]string{
		"\xab": "ab", "\x20": "20", "\xab\xcd": "ad", "\x20\x61": "21", "\x30\xab": "3b", "\x61\x20": "60",
		"\x30\x31\xab\xcd": "3d", "\x30\xab\xcd\x31": "01", "h2": "h2", "http/1.1": "h1",
	} {
		if got := string(appendALPN(nil, []string{in})); got != want {
			t.Errorf("ALPN %x: %q, want %q", in, got, want)
		}
	}
}

// TestGREASE: the sixteen reserved values, and no others.
func TestGREASE(t *testing.T) {
	n := 0
	for v := range 1 << 16 {
		if grease(uint16(v)) {
			n++
			if v&0xff != v>>8 || v&0x0f != 0x0a {
				t.Errorf("%04x taken for GREASE", v)
			}
		}
	}
	if n != 16 {
		t.Errorf("%d GREASE values, want 16", n)
	}
}

// TestFoxIOCaptures: ClientHellos captured by FoxIO (the pcaps of github.com/FoxIO-LLC/ja4,
// BSD-3), read by crypto/tls's own server as the listener reads them, give the fingerprints
// FoxIO's implementation computed for them (its test snapshots): browsers with GREASE, TLS 1.2
// without supported_versions, no server name (86 cipher suites), no ALPN, http/1.1.
//
// One capture's first ALPN protocol is 0xba 0xad: FoxIO's implementations, older than the
// specification's rule for such protocols, print "99"; the specification's rule (the first
// and last characters of the hex form) gives "bd", which is what is expected here.
func TestFoxIOCaptures(t *testing.T) {
	f, err := os.Open("testdata/foxio_hellos.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<16)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		fields := strings.Fields(sc.Text())
		name, want := fields[0], fields[1]
		if strings.HasPrefix(name, "tls-non-ascii-alpn") {
			want = strings.Replace(want, "99_", "bd_", 1)
		}
		raw, _ := hex.DecodeString(fields[2])
		h, err := readHello(raw)
		if err != nil {
			t.Errorf("%s: crypto/tls did not read the hello: %v", name, err)
			continue
		}
		if got := Fingerprint(h); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
		n++
	}
	if n < 9 {
		t.Errorf("%d captures read", n)
	}
}

var errStop = errors.New("stop")

// readHello has crypto/tls's server read a ClientHello record, as the listener does.
func readHello(raw []byte) (*tls.ClientHelloInfo, error) {
	c, s := net.Pipe()
	defer s.Close()
	go func() { _, _ = c.Write(raw); c.Close() }()
	var got *tls.ClientHelloInfo
	err := tls.Server(s, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		got = h
		return nil, errStop
	}}).Handshake()
	if got == nil {
		return nil, err
	}
	return got, nil
}

// BenchmarkFingerprint is the cost of one fingerprint of a browser's ClientHello.
func BenchmarkFingerprint(b *testing.B) {
	h := specHello()
	b.ReportAllocs()
	for b.Loop() {
		_ = Fingerprint(h)
	}
}
