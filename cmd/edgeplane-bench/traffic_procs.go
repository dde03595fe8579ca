package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.ngrok.com/ngrok"
	ngrokconfig "golang.ngrok.com/ngrok/config"
)

// The processes of the traffic benchmark other than edgeplane run this program with a
// subcommand, each in a process of its own, so that the CPU time each uses is its own.

// upstreamBody is the small body every path's requests end in.
var upstreamBody = []byte("hello from the upstream of edgeplane's traffic benchmark, 64 b.\n")

// trafficUpstream is the upstream every path ends at: a plain net/http server answering any GET
// with upstreamBody, GET /bulk?n=N with N zero bytes, POST /bulk by reading the body whole
// and answering the number of bytes it read, and GET /echo with its X-Bench header repeated.
func trafficUpstream(args []string) error {
	fs := flag.NewFlagSet("traffic-upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	length := strconv.Itoa(len(upstreamBody))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bulk" {
			bulk(w, r)
			return
		}
		if r.URL.Path == "/echo" {
			// The X-Bench request header, repeated to 512 bytes of text: the modules row's check
			// that request_headers and compression are applied.
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, strings.Repeat(r.Header.Get("X-Bench")+"\n", 512/(len(r.Header.Get("X-Bench"))+1)+1))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", length)
		_, _ = w.Write(upstreamBody)
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// bulk serves the transfer scenarios: GET sends n zero bytes, POST reads the body to its end.
func bulk(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "n must be a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		_, _ = io.CopyN(w, zeros{}, n)
	case http.MethodPost:
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// trafficProxy is the one-hop reference: net/http's httputil.ReverseProxy in front of the
// upstream, on a plain listener and, with -tls-listen, on a TLS listener with the given
// certificate. Its transport keeps as many idle upstream connections as the load generator has
// clients, so the reference is a well-configured proxy rather than one that redials.
func trafficProxy(args []string) error {
	fs := flag.NewFlagSet("traffic-proxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "plain address to listen on")
	tlsListen := fs.String("tls-listen", "", "TLS address to listen on (needs -cert and -key)")
	cert := fs.String("cert", "", "certificate chain (PEM) of the TLS listener")
	key := fs.String("key", "", "private key (PEM) of the TLS listener")
	upstream := fs.String("upstream", "", "upstream URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-upstream: %q is not a URL", *upstream)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
		DisableCompression: true}
	errc := make(chan error, 2)
	plain := &http.Server{Addr: *listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- plain.ListenAndServe() }()
	if *tlsListen != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return err
		}
		secure := &http.Server{Addr: *tlsListen, Handler: rp, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}}}
		go func() { errc <- secure.ListenAndServeTLS("", "") }()
	}
	return <-errc
}

// trafficAgent is the agent of the edgeplane paths: one ngrok-go session that binds a labeled
// tunnel (for the HTTPS edge's tunnel_group backend) and an https endpoint, both forwarded to
// the upstream the way ngrok's agents forward (each tunnel stream joined to a new upstream
// connection). It answers GET /healthz on -listen once both are bound, and serves a CPU profile
// at /debug/pprof/profile there. The authtoken comes from $EDGEPLANE_BENCH_AUTHTOKEN.
func trafficAgent(args []string) error {
	fs := flag.NewFlagSet("traffic-agent", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address of /healthz and the profile")
	server := fs.String("server", "", "edgeplane's agent listener")
	caPath := fs.String("ca", "", "edgeplane's CA certificate (PEM)")
	upstream := fs.String("upstream", "", "upstream URL")
	label := fs.String("label", "edge=bench", "label of the tunnel (key=value)")
	domain := fs.String("domain", "", "domain of the https endpoint")
	httpDomain := fs.String("http-domain", "", "domain of a plain http endpoint (none when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	caPEM, err := os.ReadFile(*caPath)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("-ca holds no certificate")
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-upstream: %q is not a URL", *upstream)
	}
	k, v, ok := strings.Cut(*label, "=")
	if !ok {
		return fmt.Errorf("-label: %q is not key=value", *label)
	}
	sess, err := ngrok.Connect(ctx, ngrok.WithServer(*server), ngrok.WithCA(pool),
		ngrok.WithAuthtoken(os.Getenv("EDGEPLANE_BENCH_AUTHTOKEN")))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer sess.Close()
	if _, err := sess.ListenAndForward(ctx, u, ngrokconfig.LabeledTunnel(ngrokconfig.WithLabel(k, v))); err != nil {
		return fmt.Errorf("labeled tunnel: %w", err)
	}
	if _, err := sess.ListenAndForward(ctx, u, ngrokconfig.HTTPEndpoint(ngrokconfig.WithDomain(*domain))); err != nil {
		return fmt.Errorf("https endpoint: %w", err)
	}
	if *httpDomain != "" {
		if _, err := sess.ListenAndForward(ctx, u, ngrokconfig.HTTPEndpoint(ngrokconfig.WithDomain(*httpDomain),
			ngrokconfig.WithScheme(ngrokconfig.SchemeHTTP))); err != nil {
			return fmt.Errorf("http endpoint: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "bound") })
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
