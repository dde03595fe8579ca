package ingress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// streamTransport carries a request to an agent over a proxy stream as one synchronous
// HTTP/1.1 exchange on the request's own goroutine: the request is written with net/http's
// Request.Write and the answer read with http.ReadResponse. net/http's Transport, which it
// replaces for agents, runs a reading and a writing goroutine per connection and hands every
// request and response between them; on a path of small requests those hand-offs were most of
// edgeplane's own CPU per request. A request with a body is the exception: its body is written
// by a goroutine of its own while the answer is read, as net/http does, so that an upstream
// answering before it has read the whole body (or streaming back while it reads) is neither
// cut nor deadlocked.
//
// It keeps the guarantees of the Transport it replaces: a stream is reused only by requests
// with the same key (the target and the public connection: a stream is never shared between
// clients); at most maxIdlePerKey idle streams per key and maxIdle in all; an idle stream is
// closed after idleTimeout; a stream is reused only after a response read to its end whose
// request was written whole, neither side asking to close; a request whose client leaves
// closes its stream; response headers are bounded by maxHeader bytes; 1xx answers are handed
// to the request's httptrace hooks (ReverseProxy forwards them) and a 101's body is the
// stream, for upgrades.
type streamTransport struct {
	maxIdlePerKey   int
	maxIdle         int
	idleTimeout     time.Duration
	watchAfter      time.Duration
	continueTimeout time.Duration
	maxHeader       int64

	// The pool's idle streams, linked through the streams themselves so that returning a stream
	// to the pool allocates nothing: by key, the most recently idle first (newer), and all of
	// them from the longest idle (oldest) to the most recent (newest).
	mu     sync.Mutex
	idle   map[string]*streamConn
	idleN  int
	oldest *streamConn
	newest *streamConn
}

func newStreamTransport() *streamTransport {
	return &streamTransport{
		maxIdlePerKey:   4,
		maxIdle:         1024,
		idleTimeout:     30 * time.Second,
		watchAfter:      100 * time.Millisecond,
		continueTimeout: time.Second,
		maxHeader:       1 << 20,
		idle:            make(map[string]*streamConn),
	}
}

// streamConn is one stream to an agent with the buffers of its exchanges. Between exchanges
// it is idle in the transport's pool; its fields below mu are the pool's, under its lock.
type streamConn struct {
	t     *streamTransport
	key   string
	c     net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	sw    *streamWriter // what bw writes to
	limit int64         // bytes the next reads may take: the header bound while headers are read
	once  sync.Once

	pooled    bool        // idle in the pool
	sameKey   *streamConn // the next idle stream of the same key, idle longer
	older     *streamConn // the pool's next stream idle longer, nil for the oldest
	newer     *streamConn // the pool's next stream idle less long, nil for the newest
	idleSince time.Time
	timer     *time.Timer
	watching  bool       // a watcher is reading the idle stream (watch)
	watched   chan error // the watcher's result, for the request that took the stream
}

// errHeaderLimit ends a read of response headers past the bound.
var errHeaderLimit = errors.New("ingress: response header limit reached")

// Read reads from the stream within the current limit; it is what br reads from.
func (sc *streamConn) Read(p []byte) (int, error) {
	if sc.limit <= 0 {
		return 0, errHeaderLimit
	}
	if int64(len(p)) > sc.limit {
		p = p[:sc.limit]
	}
	n, err := sc.c.Read(p)
	sc.limit -= int64(n)
	return n, err
}

func (sc *streamConn) close() { sc.once.Do(func() { _ = sc.c.Close() }) }

// RoundTrip carries req over an idle stream of its key (req.URL.Host, set by forward) or a new
// one opened with the request's dialInfo. A request that failed on a reused stream before any
// of the answer arrived is tried again on another when it may be replayed (the stream's agent
// or upstream had closed it while idle), as net/http does.
func (t *streamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	info, _ := req.Context().Value(dialKey).(*dialInfo)
	if info == nil {
		return nil, errors.New("ingress: no endpoint for the request")
	}
	if bad := invalidHeader(req.Header); bad != "" {
		return nil, fmt.Errorf("net/http: invalid header %s", bad)
	}
	ctx := req.Context()
	for {
		sc, reused, err := t.get(ctx, req.URL.Host, info)
		if err != nil {
			return nil, err
		}
		resp, answered, err := sc.exchange(ctx, req, info)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !reused || answered || !replayable(req) {
			return nil, err
		}
	}
}

// invalidHeader names the first header field net/http's Transport would refuse to send, "" if none.
func invalidHeader(h http.Header) string {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Sprintf("field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Sprintf("field value for %q", k)
			}
		}
	}
	return ""
}

// replayable is net/http's rule for sending a request again on another connection: no body,
// and a method (or an idempotency key) that says doing it twice is harmless.
func replayable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody {
		return false
	}
	switch r.Method {
	case "", "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	_, k1 := r.Header["Idempotency-Key"]
	_, k2 := r.Header["X-Idempotency-Key"]
	return k1 || k2
}

// errNoContinue ends the writing of a request body the agent answered before asking for it.
var errNoContinue = errors.New("ingress: answered before the body was sent")

// exchange writes req on the stream and reads its answer. answered says whether any of the
// answer arrived (a failed request is tried again on another stream only when nothing did).
// The request's context closing closes the stream, which ends any read or write on it.
func (sc *streamConn) exchange(ctx context.Context, req *http.Request, info *dialInfo) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, sc.close)
	x := &streamExchange{sc: sc, req: req, stop: stop, reuse: !req.Close && !info.once, ctx: ctx, body: &info.body}
	resp, err := x.run(ctx)
	if err != nil {
		stop()
		sc.close()
		return nil, x.answered, err
	}
	return resp, true, nil
}

// streamExchange is one request and its answer on a stream.
type streamExchange struct {
	sc    *streamConn
	req   *http.Request
	stop  func() bool
	reuse bool
	// wrote receives the outcome of writing the request when its body is written by a
	// goroutine of its own (nil otherwise: the request was written before the answer was read).
	wrote    chan error
	answered bool
	// continued is signalled by the reader when a 100 Continue (true) or a final answer
	// (false) arrives for a body that waits for 100-continue; awaiting is the reader's own
	// note that it has not signalled yet.
	continued chan bool
	awaiting  bool
	ctx       context.Context
	// responded is set once a final answer's headers are read.
	responded atomic.Bool
	// answer is the answer's body (run), part of the exchange to save an allocation per request.
	answer streamBody
	// body is the client's body under the body timeout (dialInfo.bound).
	body *idleBody
}

func (x *streamExchange) run(ctx context.Context) (*http.Response, error) {
	sc, req := x.sc, x.req
	sc.limit = math.MaxInt64
	if req.Body == nil || req.Body == http.NoBody {
		if err := x.write(); err != nil {
			return nil, err
		}
	} else {
		if httpguts.HeaderValuesContainsToken(req.Header["Expect"], "100-continue") {
			x.continued = make(chan bool, 1)
			x.awaiting = true
		}
		x.wrote = make(chan error, 1)
		go func() {
			err := x.write()
			x.wrote <- err
			if err != nil && (!x.responded.Load() || x.body.timedOut()) {
				// A body that could not be sent whole (the client's was cut or malformed)
				// ends the exchange, as with the Transport, rather than leave the agent
				// waiting for the rest; after the answer's headers, the answer is let be,
				// unless the client stopped sending past the body timeout: then the stream
				// is closed too, so the upstream sees its body end in an error (not a
				// clean end) and the answer in progress ends with the connection.
				sc.close()
			}
		}()
	}
	resp, err := x.readResponse()
	if err != nil {
		if x.wrote != nil {
			// The write's error, when it failed first, says more than the read's; a write
			// still under way (reading the client's body) is ended by the stream's closing.
			sc.close()
			select {
			case werr := <-x.wrote:
				if werr != nil && !x.answered {
					err = werr
				}
			default:
			}
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The stream is the upgraded connection's now, the ReverseProxy's to copy and close.
		resp.Body = &upgradedStream{br: sc.br, sc: sc, stop: x.stop}
		return resp, nil
	}
	if resp.Close {
		x.reuse = false
	}
	body := &x.answer
	body.x, body.body = x, resp.Body
	if resp.Body == http.NoBody {
		body.release(true)
		return resp, nil
	}
	resp.Body = body
	return resp, nil
}

// write writes the request and flushes it. The head of a request with a body goes with the
// body's first bytes (streamWriter), unless the body waits for 100-continue.
func (x *streamExchange) write() error {
	req := x.req
	sw := x.sc.sw
	if x.continued != nil {
		body := req.Body
		out := *req
		out.Body = &continueBody{x: x, continued: x.continued, body: body}
		req = &out
	} else {
		sw.hold = req.Body != nil && req.Body != http.NoBody
	}
	err := req.Write(x.sc.bw)
	if err == nil {
		err = x.sc.bw.Flush()
	}
	if err == nil {
		err = sw.release()
	}
	if err != nil {
		sw.drop()
		x.sc.bw.Reset(sw)
		return err
	}
	return nil
}

// readResponse reads the answer to the request: informational answers are handed to the
// request's httptrace hooks (at most five in a row without one), each bounded by maxHeader.
func (x *streamExchange) readResponse() (*http.Response, error) {
	sc := x.sc
	trace := httptrace.ContextClientTrace(x.req.Context())
	informational := 0
	for {
		sc.limit = sc.t.maxHeader
		if _, err := sc.br.Peek(1); err != nil {
			return nil, x.headerErr(err)
		}
		x.answered = true
		resp, err := http.ReadResponse(sc.br, x.req)
		if err != nil {
			return nil, x.headerErr(err)
		}
		sc.limit = math.MaxInt64
		code := resp.StatusCode
		if code == http.StatusContinue && x.awaiting {
			if trace != nil && trace.Got100Continue != nil {
				trace.Got100Continue()
			}
			x.continued <- true
			x.awaiting = false
		}
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			informational++
			if informational > 5 {
				return nil, errors.New("net/http: too many 1xx informational responses")
			}
			if trace != nil && trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
					return nil, err
				}
				informational = 0
			}
			continue
		}
		x.responded.Store(true)
		if x.awaiting {
			// Answered before the body was asked for (or before the wait for it ended): a
			// body not yet sent is not, and the stream, whose agent may still expect it, is
			// not reused.
			x.continued <- false
			x.awaiting = false
			x.reuse = false
		}
		return resp, nil
	}
}

// headerErr is the error of a failed read of an answer's headers, net/http's words for one
// past the bound.
func (x *streamExchange) headerErr(err error) error {
	if x.sc.limit <= 0 {
		return fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", x.sc.t.maxHeader)
	}
	return err
}

// continueBody is the body of a request that waits for 100-continue: its first read waits for
// the agent's 100 Continue, up to continueTimeout, and ends the write if a final answer came
// instead.
type continueBody struct {
	x         *streamExchange
	continued chan bool
	body      io.ReadCloser
	decided   bool
}

func (b *continueBody) Read(p []byte) (int, error) {
	if !b.decided {
		b.decided = true
		timer := time.NewTimer(b.x.sc.t.continueTimeout)
		select {
		case ok := <-b.continued:
			timer.Stop()
			if !ok {
				return 0, errNoContinue
			}
		case <-timer.C:
		}
	}
	return b.body.Read(p)
}

func (b *continueBody) Close() error { return b.body.Close() }

// streamBody is the body of an answer on a stream: read to its end and closed, the stream goes
// back to the pool when the exchange allows; closed before its end, the stream is closed (what
// is left of the answer is never read, so it cannot be taken for the next one's).
type streamBody struct {
	x    *streamExchange
	body io.ReadCloser
	eof  bool
	done bool
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("http: read on closed response body")
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil && b.x.ctx.Err() != nil:
		err = b.x.ctx.Err()
	}
	return n, err
}

func (b *streamBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if b.eof {
		_ = b.body.Close()
	}
	b.release(b.eof)
	return nil
}

// release ends the exchange: the stream goes back to the pool if the answer was read to its
// end, the request was written whole, neither side asked to close, and the client has not
// left; else it is closed.
func (b *streamBody) release(eof bool) {
	x := b.x
	ok := eof && x.reuse
	if ok && x.wrote != nil {
		select {
		case err := <-x.wrote:
			ok = err == nil
		default:
			ok = false // the body is still being written: the stream is not reused
		}
	}
	if ok && x.stop() {
		x.sc.t.put(x.sc)
		return
	}
	x.stop()
	x.sc.close()
}

// upgradedStream is the body of a 101 answer: the stream itself, read through the buffer that
// may hold the upgraded protocol's first bytes, for the ReverseProxy to copy both ways.
type upgradedStream struct {
	br   *bufio.Reader
	sc   *streamConn
	stop func() bool
}

func (u *upgradedStream) Read(p []byte) (int, error)  { return u.br.Read(p) }
func (u *upgradedStream) Write(p []byte) (int, error) { return u.sc.c.Write(p) }

func (u *upgradedStream) Close() error {
	u.stop()
	u.sc.close()
	return nil
}
