package peer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// hostileTiming keeps links up without pings for the tests of hostile peers, which send none,
// so that what ends a link is what the test sent.
var hostileTiming = func() timing { t := fastTiming; t.heartbeat = time.Hour; return t }()

// issueCustom signs tmpl with the test CA (or signer, when given), with a new P-256 key.
func issueCustom(t *testing.T, ca *testCA, tmpl *x509.Certificate) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}
}

// forwardFrame is a whole forwarded stream as a replica opens it: a SYN DATA frame on stream 1
// carrying the header of a request for tun.
func forwardFrame(t *testing.T, tun string) []byte {
	t.Helper()
	hdr, err := appendHeader(nil, req(tun))
	if err != nil {
		t.Fatal(err)
	}
	return rawFrame(frame.TypeData, frame.FlagDataSyn, 1, len(hdr), hdr)
}

// rawFrame renders a muxado frame header (length, type and flags, stream id) and payload.
func rawFrame(typ frame.Type, flags frame.Flags, id uint32, length int, payload []byte) []byte {
	b := []byte{byte(length >> 16), byte(length >> 8), byte(length), byte(typ)<<4 | byte(flags)}
	b = binary.BigEndian.AppendUint32(b, id)
	return append(b, payload...)
}

// tryLink connects to n with cert (nil: none) offering protos, sends a whole forwarded stream
// for tn_echo, and returns what reading the answer gives.
func tryLink(t *testing.T, n *node, cert *tls.Certificate, protos []string) ([]byte, error) {
	t.Helper()
	conf := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, NextProtos: protos}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.Dial("tcp", n.addr, conf)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(forwardFrame(t, "tn_echo")); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b := make([]byte, 64)
	k, err := c.Read(b)
	return b[:k], err
}

// TestOnlyReplicaCertificatesOpenALink: a connection without a certificate, or with one of
// edgeplane's CA that does not name exactly one replica, or of another CA, or without the
// link's protocol, is closed in its handshake: the stream it sent is never read (the agents
// see no request) and the link records no peer. A replica's certificate gets its answer.
func TestOnlyReplicaCertificatesOpenALink(t *testing.T) {
	ca := newTestCA(t)
	b := newNode(t, ca, "rep_b", nodeOpts{timing: hostileTiming})
	endpoint, err := ca.ca.Issue("app.example.com") // what a public listener presents
	if err != nil {
		t.Fatal(err)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	other := newTestCA(t)
	otherCert, err := IssueCertificate(other.cert, other.key, "rep_x", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	good, err := IssueCertificate(ca.cert, ca.key, "rep_x", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	link := []string{alpn}
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		protos []string
	}{
		{"no certificate", nil, link},
		{"an endpoint certificate of the CA", endpoint, link},
		{"a client certificate of the CA with a DNS name", issueCustom(t, ca, &x509.Certificate{
			Subject: pkix.Name{CommonName: "app.example.com"}, DNSNames: []string{"app.example.com"}, ExtKeyUsage: both}), link},
		{"a replica URI and a DNS name", issueCustom(t, ca, &x509.Certificate{
			DNSNames: []string{"app.example.com"}, URIs: []*url.URL{ReplicaURI("rep_x")}, ExtKeyUsage: both}), link},
		{"two replica URIs", issueCustom(t, ca, &x509.Certificate{
			URIs: []*url.URL{ReplicaURI("rep_x"), ReplicaURI("rep_y")}, ExtKeyUsage: both}), link},
		{"another URI", issueCustom(t, ca, &x509.Certificate{
			URIs: []*url.URL{uri("spiffe://edgeplane/replica/rep_x")}, ExtKeyUsage: both}), link},
		{"a malformed replica URI", issueCustom(t, ca, &x509.Certificate{
			URIs: []*url.URL{uri("edgeplane-replica://rep_x/")}, ExtKeyUsage: both}), link},
		{"a replica certificate for servers only", issueCustom(t, ca, &x509.Certificate{
			URIs: []*url.URL{ReplicaURI("rep_x")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}), link},
		{"a replica certificate of another CA", otherCert, link},
		{"a replica certificate without the link's protocol", good, nil},
		{"a replica certificate with another protocol", good, []string{"h2"}},
	} {
		got, err := tryLink(t, b, tc.cert, tc.protos)
		if err == nil || !strings.Contains(err.Error(), "tls: ") {
			t.Errorf("%s: read %x, %v; want the TLS handshake refused", tc.name, got, err)
		}
		if r := b.agents.requests(); len(r) != 0 || len(b.link.Stats()) != 0 {
			t.Fatalf("%s: B read the stream: requests %v, stats %+v", tc.name, r, b.link.Stats())
		}
	}
	// The same stream with a replica's certificate is read and answered.
	got, err := tryLink(t, b, good, link)
	if err != nil || len(got) == 0 {
		t.Fatalf("a replica's certificate: %x, %v", got, err)
	}
	eventually(t, "the request", func() bool { return len(b.agents.requests()) == 1 })
	if r := b.agents.requests(); r[0].TunnelID != "tn_echo" {
		t.Fatalf("requests: %v", r)
	}
}

// TestServerMustBeTheReplicaDialled: a server presenting another replica's certificate, or a
// certificate that is not a replica's, is refused by the dialler, and nothing is sent to it.
func TestServerMustBeTheReplicaDialled(t *testing.T) {
	ca := newTestCA(t)
	a, c := newNode(t, ca, "rep_a", nodeOpts{}), newNode(t, ca, "rep_c", nodeOpts{})
	_, err := a.link.Dial(testCtx(t), "rep_b", c.addr, req("tn_echo"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "the server is replica rep_c, not rep_b") {
		t.Fatalf("dial: %v", err)
	}
	if a.link.Up("rep_b") || len(c.agents.requests()) != 0 {
		t.Fatalf("up %v, C's requests %v", a.link.Up("rep_b"), c.agents.requests())
	}
	// An ordinary TLS server of the same CA (an endpoint's certificate) is no replica either.
	endpoint, err := ca.ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*endpoint}, NextProtos: []string{alpn}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	_, err = a.link.Dial(testCtx(t), "rep_d", ln.Addr().String(), req("tn_echo"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "names hosts or addresses") {
		t.Fatalf("dial to an endpoint's server: %v", err)
	}
}

// rawSession opens a link to n as replica id, with its own muxado session and no pings: a
// replica that misbehaves.
func rawSession(t *testing.T, ca *testCA, n *node, id string) muxado.Session {
	t.Helper()
	cert, err := IssueCertificate(ca.cert, ca.key, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", n.addr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		NextProtos: []string{alpn}, Certificates: []tls.Certificate{*cert}})
	if err != nil {
		t.Fatal(err)
	}
	sess := muxado.Client(c, &muxado.Config{})
	t.Cleanup(func() { sess.Close() })
	return sess
}

// rawHeader is a forwarded stream's header carrying body as its request.
func rawHeader(body string) []byte {
	return append(binary.BigEndian.AppendUint16([]byte{kindForward}, uint16(len(body))), body...)
}

// TestBadHeadersCutThePeer: a stream whose header is not a replica's ends the peer's link
// (saying why), having read no more than a header's bound; a header that does not arrive in time
// ends only its stream.
func TestBadHeadersCutThePeer(t *testing.T) {
	ca := newTestCA(t)
	log := &logBuffer{}
	b := newNode(t, ca, "rep_b", nodeOpts{timing: hostileTiming, log: log})
	for _, tc := range []struct {
		name, why string
		send      []byte
	}{
		{"an oversized header", "a request of 65535 bytes", []byte{kindForward, 0xff, 0xff}},
		{"a header that is not JSON", "bad stream header", rawHeader("hello")},
		{"an unknown field", "unknown field", rawHeader(`{"tunnel":"tn_echo","client":"1.2.3.4:5","x":1}`)},
		{"data after the request", "data after the request", rawHeader(`{"tunnel":"tn_echo","client":"1.2.3.4:5"} {}`)},
		{"an invalid request", "not a row id", rawHeader(`{"tunnel":"../x","client":"1.2.3.4:5"}`)},
		{"an unknown kind", "unknown kind 7", []byte{7}},
	} {
		sess := rawSession(t, ca, b, "rep_evil")
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = st.Write(tc.send) // may see the link's end before its own success
		within(t, tc.name+": the link's end", func() { sess.Wait() })
		eventually(t, tc.name+": the reason in the log", func() bool { return log.has(tc.why) })
		eventually(t, tc.name+": B to drop the link", func() bool { return b.stats("rep_evil").Inbound == 0 })
	}
	if r := b.agents.requests(); len(r) != 0 {
		t.Fatalf("requests: %v", r)
	}

	// A header that does not arrive in time ends its stream; the link serves the next one.
	sess := rawSession(t, ca, b, "rep_slow")
	slow, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Write([]byte{kindForward, 0}); err != nil {
		t.Fatal(err)
	}
	within(t, "the slow stream's end", func() {
		if n, err := slow.Read(make([]byte, 1)); err == nil {
			t.Errorf("the slow stream read %d bytes", n)
		}
	})
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := appendHeader(nil, req("tn_echo"))
	if _, err := st.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if err := readAnswer(st); err != nil {
		t.Fatalf("the next stream's answer: %v", err)
	}
	if b.stats("rep_slow").Inbound != 1 {
		t.Fatalf("B dropped the link of the slow stream: %+v", b.stats("rep_slow"))
	}
}

// TestBadFramesCutThePeer: frames muxado would buffer whole, skip, or keep streams for end the
// link at once, before their payload is read.
func TestBadFramesCutThePeer(t *testing.T) {
	ca := newTestCA(t)
	log := &logBuffer{}
	b := newNode(t, ca, "rep_b", nodeOpts{timing: hostileTiming, log: log})
	cert, err := IssueCertificate(ca.cert, ca.key, "rep_evil", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := appendHeader(nil, req("tn_stall"))
	full := make([]byte, Window)
	copy(full, hdr)
	for _, tc := range []struct {
		name, why string
		send      []byte
	}{
		// Only the 8-byte header of a 16 MiB frame: a link that read its payload would wait.
		{"a DATA frame larger than the window", "larger than the 262144-byte window",
			rawFrame(frame.TypeData, frame.FlagDataSyn, 1, 0xffffff, nil)},
		{"a GOAWAY with a long text", "a GOAWAY of", rawFrame(frame.TypeGoAway, 0, 0, 1<<20, make([]byte, 8))},
		{"an unknown frame type", "unknown type 9", rawFrame(9, 0, 1, 4, []byte("junk"))},
		{"a reserved stream id", "reserved bit", rawFrame(frame.TypeWndInc, 0, 1<<31|1, 4, []byte{0, 0, 0, 1})},
		// Two windows' worth with no credit: the agent never reads, so the stream overruns.
		{"a stream overrunning its window", "overran its window", append(
			rawFrame(frame.TypeData, frame.FlagDataSyn, 1, len(full), full),
			rawFrame(frame.TypeData, 0, 1, len(full), make([]byte, Window))...)},
	} {
		c, err := tls.Dial("tcp", b.addr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
			NextProtos: []string{alpn}, Certificates: []tls.Certificate{*cert}})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = c.Write(tc.send) }()
		within(t, tc.name+": the link's end", func() { _, _ = io.Copy(io.Discard, c) })
		c.Close()
		eventually(t, tc.name+": the reason in the log", func() bool { return log.has(tc.why) })
	}
}

// TestStreamsFromTheListenerCutTheLink: the replica a link was dialled to may open no stream on
// it; one that does is cut.
func TestStreamsFromTheListenerCutTheLink(t *testing.T) {
	ca := newTestCA(t)
	log := &logBuffer{}
	a := newNode(t, ca, "rep_a", nodeOpts{log: log})
	fake, err := NewIdentity(ca.cert, ca.key, "rep_b")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", fake.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				sess := muxado.Server(c, &muxado.Config{})
				defer sess.Close()
				st, err := sess.OpenStream()
				if err == nil {
					_, _ = st.Write([]byte{kindForward})
				}
				sess.Wait()
			}()
		}
	}()
	a.link.SetPeers(map[string]string{"rep_b": ln.Addr().String()})
	eventually(t, "the link's end", func() bool { return log.has("the listening replica opened a stream") })
}

// TestStreamLimitOfTheHolder: a peer that opens more streams than the holder allows gets the
// extra ones refused as busy, and the others still work.
func TestStreamLimitOfTheHolder(t *testing.T) {
	ca := newTestCA(t)
	b := newNode(t, ca, "rep_b", nodeOpts{timing: hostileTiming, maxStreams: 2})
	sess := rawSession(t, ca, b, "rep_greedy")
	hdr, _ := appendHeader(nil, req("tn_echo"))
	var held []muxado.Stream
	for range 2 {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(hdr); err != nil {
			t.Fatal(err)
		}
		if err := readAnswer(st); err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
	}
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if err := readAnswer(st); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "its limit") {
		t.Fatalf("the third stream: %v", err)
	}
	held[0].Close()
	eventually(t, "room for a stream", func() bool { return b.stats("rep_greedy").StreamsIn < 2 })
	st, err = sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if err := readAnswer(st); err != nil {
		t.Fatalf("after a close: %v", err)
	}
}
