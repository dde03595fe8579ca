package enforce

import (
	"compress/gzip"
	"compress/zlib"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
)

// Compression is the compression module (and an agent bind's Compression option): a response
// is compressed with br, gzip, deflate or compress, the coding the client's Accept-Encoding
// prefers by q-value (on a tie, the first of Codings), when
//
//   - its content type is compressible (text, JSON, XML, JavaScript, SVG and the like),
//   - the upstream did not encode it already (no Content-Encoding but identity),
//   - it is not a range (206, Content-Range), a 204 or a 304, nor the answer to a HEAD,
//   - its Cache-Control does not say no-transform, and
//   - its Content-Length, when given, is at least MinCompressSize bytes.
//
// A compressed response loses its Content-Length, gets Content-Encoding, and a strong ETag
// becomes weak (the bytes differ from the upstream's). Every response compressible by the
// rules above gets Vary: Accept-Encoding, compressed or not. The body is compressed as it
// streams: nothing is buffered beyond the compressor's window, and a flush by the upstream
// (streaming responses, server-sent events) flushes the compressor. A client accepting
// neither coding gets the response unchanged.
type Compression struct{}

// MinCompressSize is the smallest body, by its Content-Length, worth compressing: the coding's
// header and trailer would make smaller ones bigger.
const MinCompressSize = 256

// NewCompression builds the stage; the module has no configuration.
func NewCompression() *Compression { return &Compression{} }

// Name is the module's name.
func (c *Compression) Name() string { return "compression" }

// Wrap compresses the responses of next.
func (c *Compression) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		coding := ""
		if r.Method != http.MethodHead {
			coding = NegotiateCoding(r.Header.Values("Accept-Encoding"))
		}
		cw := &compressWriter{ResponseWriter: w, coding: coding}
		next.ServeHTTP(cw, r)
		// Not deferred: a handler that panics (a proxied body cut off) must not get a
		// well-formed trailer that would make the truncated body look complete.
		cw.finish()
	})
}

// NegotiateCoding picks the coding for an Accept-Encoding header's values: the one of Codings
// with the highest q-value above 0 (on a tie, the first in Codings; "*" stands for any coding
// not named; x-gzip is gzip and x-compress compress; q=0 refuses a coding), or "" when the
// client accepts none of them, and the response goes as it is.
func NegotiateCoding(accept []string) string { return negotiate(accept, Codings) }

// Codings are the content codings edgeplane compresses with, in its order of preference on a
// tie of q-values: br first, as it makes the smallest bodies (browsers name gzip, deflate and
// br with equal weight), then gzip, then deflate, and compress (Unix LZW, which makes the
// largest) last: ngrok's four.
var Codings = []string{"br", "gzip", "deflate", "compress"}

// negotiate is NegotiateCoding among codings (a subset of Codings, in order of preference).
func negotiate(accept []string, codings []string) string {
	q := map[string]float64{}
	star := -1.0
	for _, v := range accept {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			weight := 1.0
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
					if err != nil || f < 0 || f > 1 {
						f = 0 // a malformed weight does not accept the coding
					}
					weight = f
				}
			}
			switch name {
			case "x-gzip":
				name = "gzip"
			case "x-compress":
				name = "compress"
			}
			if name == "*" {
				star = weight
				continue
			}
			if old, seen := q[name]; !seen || weight > old {
				q[name] = weight
			}
		}
	}
	best, bestQ := "", 0.0
	for _, c := range codings {
		w, ok := q[c]
		if !ok {
			w = max(star, 0)
		}
		if w > bestQ {
			best, bestQ = c, w
		}
	}
	return best
}

// compressibleTypes are media types, beyond text/*, +json and +xml, that compress well.
var compressibleTypes = map[string]bool{
	"application/json": true, "application/javascript": true, "application/x-javascript": true,
	"application/ecmascript": true, "application/xml": true, "application/wasm": true,
	"application/graphql": true, "application/x-ndjson": true, "application/x-www-form-urlencoded": true,
	"application/vnd.ms-fontobject": true, "application/x-font-ttf": true, "font/ttf": true,
	"font/otf": true, "image/x-icon": true, "image/vnd.microsoft.icon": true, "image/bmp": true,
}

// Compressible reports whether a Content-Type names a media type worth compressing.
func Compressible(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "+json") ||
		strings.HasSuffix(mt, "+xml") || compressibleTypes[mt]
}

// eligible applies the rules of Compression to a response about to be written.
func eligible(code int, h http.Header) bool {
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || code == http.StatusPartialContent {
		return false
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return false
	}
	if h.Get("Content-Range") != "" || !Compressible(h.Get("Content-Type")) {
		return false
	}
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(d), "no-transform") {
				return false
			}
		}
	}
	if cl := h.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n < MinCompressSize {
			return false
		}
	}
	return true
}

// addVary adds Accept-Encoding to the response's Vary unless it is listed already (or "*").
func addVary(h http.Header) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			if f == "*" || strings.EqualFold(f, "Accept-Encoding") {
				return
			}
		}
	}
	h.Add("Vary", "Accept-Encoding")
}

// encoder is a compressor of one response.
type encoder interface {
	io.WriteCloser
	Flush() error
	Reset(io.Writer)
}

// brotliOptions trade density for speed, as responses are compressed while they stream: at
// quality 1 brotli takes less CPU than gzip's default level and still writes smaller bodies
// (BenchmarkCompress: a 16 KiB page to 675 bytes against gzip's 805, where quality 2 to 4 take
// two to three times gzip's time); the 512 KiB window bounds a writer's memory.
var brotliOptions = brotli.WriterOptions{Quality: 1, LGWin: 19}

var (
	gzipPool   = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}
	zlibPool   = sync.Pool{New: func() any { return zlib.NewWriter(io.Discard) }}
	brotliPool = sync.Pool{New: func() any { return brotli.NewWriterOptions(io.Discard, brotliOptions) }}
	lzwPool    = sync.Pool{New: func() any { return newLZWWriter(io.Discard) }}
)

// compressWriter decides at the final status whether to compress, then writes through the
// encoder when it does.
type compressWriter struct {
	http.ResponseWriter
	coding      string
	wroteHeader bool
	enc         encoder
}

func (w *compressWriter) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		w.ResponseWriter.WriteHeader(code) // informational responses, and Go's own complaint on a second call
		return
	}
	w.wroteHeader = true
	h := w.Header()
	if eligible(code, h) {
		addVary(h)
		if w.coding != "" {
			h.Del("Content-Length")
			h.Set("Content-Encoding", w.coding)
			if et := h.Get("Etag"); et != "" && !strings.HasPrefix(et, "W/") {
				h.Set("Etag", "W/"+et)
			}
			switch w.coding {
			case "br":
				w.enc = brotliPool.Get().(*brotli.Writer)
			case "gzip":
				w.enc = gzipPool.Get().(*gzip.Writer)
			case "compress":
				w.enc = lzwPool.Get().(*lzwWriter)
			default:
				w.enc = zlibPool.Get().(*zlib.Writer)
			}
			w.enc.Reset(w.ResponseWriter)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *compressWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.enc != nil {
		return w.enc.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// FlushError pushes what the compressor holds to the client, then flushes the connection.
func (w *compressWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.enc != nil {
		if err := w.enc.Flush(); err != nil {
			return err
		}
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for callers that use http.Flusher.
func (w *compressWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (w *compressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the coding's trailer and returns the encoder to its pool.
func (w *compressWriter) finish() {
	if w.enc == nil {
		return
	}
	_ = w.enc.Close()
	w.enc.Reset(io.Discard)
	switch e := w.enc.(type) {
	case *gzip.Writer:
		gzipPool.Put(e)
	case *zlib.Writer:
		zlibPool.Put(e)
	case *brotli.Writer:
		brotliPool.Put(e)
	case *lzwWriter:
		lzwPool.Put(e)
	}
	w.enc = nil
}
