package peer

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestHeaderRoundTrip: a request survives its header, and the header's reader leaves what
// follows it on the stream.
func TestHeaderRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{TunnelID: "tn_2abcDEF", ClientAddr: "203.0.113.7:41000"},
		{TunnelID: "tn_x", ClientAddr: "[2001:db8::1]:443", Proto: "https", EdgeType: "3", Passthrough: true},
		{TunnelID: "tn_x", ClientAddr: "[::ffff:10.0.0.1]:1", Proto: "tcp", EdgeType: "1"},
	} {
		b, err := appendHeader(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != kindForward {
			t.Fatalf("kind %d", b[0])
		}
		rd := bytes.NewReader(append(b[1:], "GET / HTTP/1.1\r\n"...))
		got, err := readRequest(rd)
		if err != nil || got != r {
			t.Fatalf("read %+v, %v; want %+v", got, err, r)
		}
		if rest, _ := io.ReadAll(rd); string(rest) != "GET / HTTP/1.1\r\n" {
			t.Fatalf("the header took %q of what followed it", rest)
		}
	}
}

// TestBadRequests: requests the holder would refuse are neither sent nor read, each with its
// reason.
func TestBadRequests(t *testing.T) {
	ok := Request{TunnelID: "tn_a", ClientAddr: "1.2.3.4:5"}
	for _, tc := range []struct {
		change func(*Request)
		why    string
	}{
		{func(r *Request) { r.TunnelID = "" }, "not a row id"},
		{func(r *Request) { r.TunnelID = "tn a" }, "not a row id"},
		{func(r *Request) { r.TunnelID = strings.Repeat("t", 129) }, "not a row id"},
		{func(r *Request) { r.ClientAddr = "" }, "not ip:port"},
		{func(r *Request) { r.ClientAddr = "example.com:80" }, "not ip:port"},
		{func(r *Request) { r.Proto = "HTTP" }, "protocol"},
		{func(r *Request) { r.Proto = strings.Repeat("h", 17) }, "protocol"},
		{func(r *Request) { r.EdgeType = "x" }, "edge type"},
	} {
		r := ok
		tc.change(&r)
		if _, err := appendHeader(nil, r); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%+v: %v, want %q", r, err, tc.why)
		}
		// The same request, sent anyway, is refused by the reader.
		body := `{"tunnel":"` + r.TunnelID + `","client":"` + r.ClientAddr + `","proto":"` + r.Proto + `","edge":"` + r.EdgeType + `"}`
		if _, err := readRequest(bytes.NewReader(rawHeader(body)[1:])); !errors.Is(err, errBadHeader) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("reading %s: %v", body, err)
		}
	}
	for name, b := range map[string][]byte{
		"too long":      {0xff, 0xff},
		"not JSON":      rawHeader("{")[1:],
		"unknown field": rawHeader(`{"tunnel":"tn_a","client":"1.2.3.4:5","admin":true}`)[1:],
		"two values":    rawHeader(`{"tunnel":"tn_a","client":"1.2.3.4:5"}{}`)[1:],
		"an array":      rawHeader(`[]`)[1:],
	} {
		if _, err := readRequest(bytes.NewReader(b)); !errors.Is(err, errBadHeader) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A header cut short is the stream's end, not a bad header.
	b, _ := appendHeader(nil, ok)
	if _, err := readRequest(bytes.NewReader(b[1 : len(b)-1])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a short header: %v", err)
	}
	// The largest request that fits is sent; one byte more is not.
	r := ok
	r.TunnelID = strings.Repeat("t", 128)
	if b, err := appendHeader(nil, r); err != nil || len(b) > maxHeader {
		t.Errorf("the largest request: %d bytes, %v", len(b), err)
	}
}

// TestAnswers: each answer reads back as what it says, a refusal's text is bounded, and an
// answer that is none is a bad header.
func TestAnswers(t *testing.T) {
	if err := readAnswer(bytes.NewReader(appendAnswer(nil, statusOK, "ignored"))); err != nil {
		t.Fatalf("ok: %v", err)
	}
	for status, want := range map[byte]error{statusNoTunnel: ErrNoTunnel, statusAgentDial: ErrAgentDial, statusBusy: ErrUnavailable} {
		b := appendAnswer(nil, status, strings.Repeat("x", 1000))
		if len(b) != 2+maxMessage {
			t.Fatalf("status %d: %d bytes", status, len(b))
		}
		rd := bytes.NewReader(append(b, "after"...))
		err := readAnswer(rd)
		if !errors.Is(err, want) || !strings.HasSuffix(err.Error(), strings.Repeat("x", maxMessage)) {
			t.Fatalf("status %d: %v", status, err)
		}
		if rest, _ := io.ReadAll(rd); string(rest) != "after" {
			t.Fatalf("status %d: the answer took %q", status, rest)
		}
	}
	if err := readAnswer(bytes.NewReader([]byte{9})); !errors.Is(err, errBadHeader) {
		t.Fatalf("status 9: %v", err)
	}
	if err := readAnswer(bytes.NewReader([]byte{statusNoTunnel, 5, 'a'})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a short answer: %v", err)
	}
}

// FuzzReadRequest: whatever a peer sends as a header, the reader reads at most the header's
// bound, never panics, and returns only requests it would send itself.
func FuzzReadRequest(f *testing.F) {
	for _, r := range []Request{{TunnelID: "tn_a", ClientAddr: "1.2.3.4:5"},
		{TunnelID: "tn_b", ClientAddr: "[::1]:443", Proto: "https", EdgeType: "3", Passthrough: true}} {
		b, _ := appendHeader(nil, r)
		f.Add(b[1:])
	}
	f.Add([]byte{0xff, 0xff})
	f.Add(rawHeader(`{"tunnel":"tn_a","client":"1.2.3.4:5","x":1}`)[1:])
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := bytes.NewReader(b)
		r, err := readRequest(rd)
		if read := len(b) - rd.Len(); read > maxHeader {
			t.Fatalf("read %d bytes", read)
		}
		if err != nil {
			return
		}
		again, err := appendHeader(nil, r)
		if err != nil {
			t.Fatalf("accepted %+v, which the sender refuses: %v", r, err)
		}
		if back, err := readRequest(bytes.NewReader(again[1:])); err != nil || back != r {
			t.Fatalf("%+v does not survive its header: %+v, %v", r, back, err)
		}
	})
}

// FuzzReadAnswer: whatever a holder answers, the reader never panics and reads at most an
// answer's bound.
func FuzzReadAnswer(f *testing.F) {
	f.Add(appendAnswer(nil, statusOK, ""))
	f.Add(appendAnswer(nil, statusNoTunnel, "gone"))
	f.Add([]byte{statusBusy, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := bytes.NewReader(b)
		_ = readAnswer(rd)
		if read := len(b) - rd.Len(); read > 2+maxMessage {
			t.Fatalf("read %d bytes", read)
		}
	})
}
