package tunnel

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"golang.ngrok.com/muxado/v2"
	"golang.ngrok.com/muxado/v2/frame"
)

// recorder keeps every Write it is given, as a separate copy.
type recorder struct{ writes [][]byte }

func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

// TestSingleWriteFramerBytes renders frames of every type and of sizes around the caps with
// muxado's framer and with edgeplane's: the bytes must be the same, in one Write up to
// maxCoalesced bytes and in two above, and muxado's framer must read them back.
func TestSingleWriteFramerBytes(t *testing.T) {
	payload := make([]byte, 3*maxCoalesced+5)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	type testFrame struct {
		name string
		f    frame.Frame
	}
	var frames []testFrame
	for _, n := range []int{0, 1, inlineLen - frameHeaderLen, inlineLen - frameHeaderLen + 1, 4096,
		maxCoalesced - frameHeaderLen, maxCoalesced - frameHeaderLen + 1, 2 * maxCoalesced, len(payload)} {
		for _, fl := range []struct{ fin, syn bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			d := new(frame.Data)
			if err := d.Pack(frame.StreamId(2*n+1), payload[:n], fl.fin, fl.syn); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, testFrame{fmt.Sprintf("DATA %d bytes fin=%v syn=%v", n, fl.fin, fl.syn), d})
		}
	}
	rst := new(frame.Rst)
	if err := rst.Pack(7, 3); err != nil {
		t.Fatal(err)
	}
	inc := new(frame.WndInc)
	if err := inc.Pack(9, 0x7FFFFFFF); err != nil {
		t.Fatal(err)
	}
	frames = append(frames, testFrame{"RST", rst}, testFrame{"WNDINC", inc})
	for _, n := range []int{0, 20, maxCoalesced - 16, maxCoalesced - 15, maxCoalesced + 100} {
		g := new(frame.GoAway)
		if err := g.Pack(41, 2, payload[:n]); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, testFrame{fmt.Sprintf("GOAWAY debug %d bytes", n), g})
	}

	var want bytes.Buffer
	ref := frame.NewFramer(nil, &want)
	var got recorder
	for _, tf := range frames {
		want.Reset()
		got.writes = nil
		ours := newSingleWriteFramer(nil, &got) // a session writes nothing after its GOAWAY
		if err := ref.WriteFrame(tf.f); err != nil {
			t.Fatalf("%s: muxado's framer: %v", tf.name, err)
		}
		if err := ours.WriteFrame(tf.f); err != nil {
			t.Fatalf("%s: %v", tf.name, err)
		}
		if joined := bytes.Join(got.writes, nil); !bytes.Equal(joined, want.Bytes()) {
			t.Fatalf("%s: wrote %d bytes unlike muxado's %d", tf.name, len(joined), want.Len())
		}
		wantWrites := 1
		if want.Len() > maxCoalesced {
			wantWrites = 2
		}
		if len(got.writes) != wantWrites {
			t.Errorf("%s (%d bytes): %d writes, want %d", tf.name, want.Len(), len(got.writes), wantWrites)
		}
		// muxado's own framer reads the frame back.
		back, err := frame.NewFramer(bytes.NewReader(want.Bytes()), nil).ReadFrame()
		if err != nil || back.Type() != tf.f.Type() || back.Length() != tf.f.Length() || back.StreamId() != tf.f.StreamId() {
			t.Fatalf("%s: read back %v, %v", tf.name, back, err)
		}
	}
}

// TestSingleWriteFramerAllocs: writing the frames a request mostly consists of allocates nothing.
func TestSingleWriteFramerAllocs(t *testing.T) {
	f := newSingleWriteFramer(nil, io.Discard)
	small, mid := new(frame.Data), new(frame.Data)
	if err := small.Pack(3, make([]byte, 200), false, false); err != nil {
		t.Fatal(err)
	}
	if err := mid.Pack(3, make([]byte, 8000), false, false); err != nil {
		t.Fatal(err)
	}
	inc := new(frame.WndInc)
	if err := inc.Pack(3, 200); err != nil {
		t.Fatal(err)
	}
	_ = f.WriteFrame(mid) // fill the pool
	if n := testing.AllocsPerRun(100, func() {
		_ = f.WriteFrame(small)
		_ = f.WriteFrame(mid)
		_ = f.WriteFrame(inc)
	}); n > 0 {
		t.Errorf("%.1f allocations per three frames", n)
	}
}

// tlsPair returns the two ends of a real TLS connection over loopback TCP; wrap, if not nil,
// wraps the server's TCP connection.
// selfSigned makes a certificate for name (and 127.0.0.1) and a pool trusting it, for the tests'
// TLS servers.
func selfSigned(t testing.TB, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func tlsPair(t testing.TB, wrap func(net.Conn) net.Conn) (server, client *tls.Conn) {
	t.Helper()
	cert, pool := selfSigned(t, "framer.test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		if wrap != nil {
			c = wrap(c)
		}
		sc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		_ = sc.Handshake()
		accepted <- sc
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client = tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "framer.test"})
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if server = <-accepted; server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// streamBytes is the deterministic content one side of stream label writes.
func streamBytes(label uint32, fromOpener bool) *mrand.ChaCha8 {
	var seed [32]byte
	seed[0], seed[1], seed[2], seed[3] = byte(label), byte(label>>8), byte(label>>16), byte(label>>24)
	if fromOpener {
		seed[4] = 1
	}
	return mrand.NewChaCha8(seed)
}

// sendStream writes n bytes of label's content in writes of varied sizes, then half-closes.
func sendStream(st muxado.Stream, label uint32, fromOpener bool, n int) error {
	src := streamBytes(label, fromOpener)
	sizes := mrand.New(mrand.NewPCG(uint64(label), 9))
	choices := []int{1, 7, 100, inlineLen - frameHeaderLen, inlineLen, 4096, maxCoalesced - frameHeaderLen,
		maxCoalesced, 40000, 300000}
	buf := make([]byte, 300000)
	for n > 0 {
		k := min(n, choices[sizes.IntN(len(choices))])
		_, _ = src.Read(buf[:k])
		if _, err := st.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return st.CloseWrite()
}

// checkStream reads the peer's side of stream label to EOF and compares every byte.
func checkStream(st muxado.Stream, label uint32, fromOpener bool, n int) error {
	src := streamBytes(label, fromOpener)
	got, want := make([]byte, 64<<10), make([]byte, 64<<10)
	total := 0
	for {
		k, err := st.Read(got)
		if k > 0 {
			if total+k > n {
				return fmt.Errorf("stream %d: more than the %d bytes sent", label, n)
			}
			_, _ = src.Read(want[:k])
			if !bytes.Equal(got[:k], want[:k]) {
				return fmt.Errorf("stream %d: bytes differ in %d..%d", label, total, total+k)
			}
			total += k
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("stream %d: read after %d bytes: %w", label, total, err)
		}
	}
	if total != n {
		return fmt.Errorf("stream %d: %d bytes, want %d", label, total, n)
	}
	return nil
}

// TestSingleWriteFramerSessionOverTLS runs a muxado session over a real TLS connection with
// edgeplane's framer on the server side and muxado's own (what ngrok-go uses) on the client
// side: streams opened by both sides at once, small and bulk, each carrying data both ways at
// the same time, every byte checked; then a reset and a GOAWAY with a debug payload.
func TestSingleWriteFramerSessionOverTLS(t *testing.T) {
	sc, cc := tlsPair(t, nil)
	srv := muxado.Server(sc, &muxado.Config{NewFramer: newSingleWriteFramer})
	cli := muxado.Client(cc, &muxado.Config{})
	defer srv.Close()
	defer cli.Close()

	// label → bytes each way; labels 0..9 are opened by the client, 100..109 by the server.
	sizes := map[uint32]int{}
	for i := range uint32(10) {
		n := []int{0, 1, 5000, 100_000, 3 << 20}[i%5]
		if i == 4 {
			n = 16 << 20 // more than the window many times over
		}
		sizes[i], sizes[100+i] = n, n
	}
	errc := make(chan error, 64)
	var wg sync.WaitGroup
	// serve answers the streams one session accepts: the label first, then both ways at once.
	serve := func(sess muxado.Session, count int) {
		for range count {
			st, err := sess.AcceptStream()
			if err != nil {
				errc <- err
				return
			}
			wg.Go(func() {
				defer st.Close()
				var lb [4]byte
				if _, err := io.ReadFull(st, lb[:]); err != nil {
					errc <- err
					return
				}
				label := uint32(lb[0]) | uint32(lb[1])<<8 | uint32(lb[2])<<16 | uint32(lb[3])<<24
				exchange(st, label, false, sizes[label], errc)
			})
		}
	}
	open := func(sess muxado.Session, label uint32) {
		defer wg.Done()
		st, err := sess.OpenStream()
		if err != nil {
			errc <- err
			return
		}
		defer st.Close()
		if _, err := st.Write([]byte{byte(label), byte(label >> 8), byte(label >> 16), byte(label >> 24)}); err != nil {
			errc <- err
			return
		}
		exchange(st, label, true, sizes[label], errc)
	}
	go serve(srv, 10)
	go serve(cli, 10)
	for i := range uint32(10) {
		wg.Add(2)
		go open(cli, i)
		go open(srv, 100+i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("streams did not finish within 60 s")
	}
	close(errc)
	for err := range errc {
		t.Error(err)
	}

	// A stream the server closes while the client still writes: the server answers the data
	// with a RST (written by edgeplane's framer), and the client's writes fail.
	st, err := cli.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	peer, err := srv.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	peer.Close()
	chunk := make([]byte, 1000)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := st.Write(chunk); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a stream the peer closed never failed")
		}
	}

	// A GOAWAY with a debug payload larger than maxCoalesced reaches the client intact.
	debug := bytes.Repeat([]byte("goaway debug "), 2*maxCoalesced/13)
	goAway, ok := srv.(interface {
		GoAway(muxado.ErrorCode, []byte, time.Time) error
	})
	if !ok {
		t.Fatal("muxado's session has no GoAway method")
	}
	if err := goAway.GoAway(muxado.ProtocolError, debug, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	sc.Close() // end the transport without the GOAWAY a session's Close would send after it
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, remote, last := cli.Wait()
		if !bytes.Equal(last, debug) {
			t.Errorf("client got a GOAWAY debug of %d bytes, want %d", len(last), len(debug))
		}
		if code, _ := muxado.GetError(remote); code != muxado.ProtocolError {
			t.Errorf("client got GOAWAY error %v", remote)
		}
	}()
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("the client session did not end after the GOAWAY")
	}
}

// exchange sends label's bytes on st and checks the peer's at the same time.
func exchange(st muxado.Stream, label uint32, opener bool, n int, errc chan<- error) {
	sent := make(chan error, 1)
	go func() { sent <- sendStream(st, label, opener, n) }()
	if err := checkStream(st, label, !opener, n); err != nil {
		errc <- err
	}
	if err := <-sent; err != nil {
		errc <- fmt.Errorf("stream %d: write: %w", label, err)
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestFramerRefusesAfterGoAway: once a GOAWAY is written, or a write fails, the session is
// ending and WriteFrame refuses every later frame without writing it (muxado's writer can still
// hand over a frame its stream is packing again).
func TestFramerRefusesAfterGoAway(t *testing.T) {
	data := new(frame.Data)
	if err := data.Pack(1, []byte("late"), false, false); err != nil {
		t.Fatal(err)
	}
	var got recorder
	f := newSingleWriteFramer(nil, &got)
	if err := f.WriteFrame(data); err != nil {
		t.Fatalf("a DATA frame before the GOAWAY: %v", err)
	}
	ga := new(frame.GoAway)
	if err := ga.Pack(0, 0, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFrame(ga); err != nil {
		t.Fatalf("the GOAWAY: %v", err)
	}
	writes := len(got.writes)
	if err := f.WriteFrame(data); !errors.Is(err, errSessionEnding) {
		t.Errorf("a DATA frame after the GOAWAY: %v, want errSessionEnding", err)
	}
	if len(got.writes) != writes {
		t.Errorf("%d writes after the GOAWAY, want none", len(got.writes)-writes)
	}

	f = newSingleWriteFramer(nil, failingWriter{})
	if err := f.WriteFrame(data); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("a write to a closed transport: %v", err)
	}
	if err := f.WriteFrame(data); !errors.Is(err, errSessionEnding) {
		t.Errorf("the frame after a failed write: %v, want errSessionEnding", err)
	}
}
