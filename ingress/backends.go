package ingress

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/edgeplane/edgeplane/internal/outbound"
	"github.com/edgeplane/edgeplane/plan"
)

// target is where a backend sends one connection or request: a fixed response (respond), or a
// connection to open (dial), keyed for the HTTP transport's pool.
type target struct {
	respond *plan.Backend
	dial    func(ctx context.Context) (net.Conn, error)
	key     string
	// backend is the id of the backend chosen (the leaf of a failover or weighted tree), for
	// the inspector.
	backend string
	// once: the connection is closed after this request instead of kept for the next
	// (an endpoint whose replica is draining: Drainer).
	once bool
	// static: a static backend's address, not an agent's stream.
	static bool
	// account is the account whose route or endpoint the request was routed to (forward's
	// share of the large copy buffers, bulkcopy.go).
	account string
}

// conn describes the public connection a backend is chosen for.
type conn struct {
	account, clientAddr, proto, edgeType string
	passthrough                          bool
}

// choose resolves a backend tree to one target. A tunnel group takes the connection when one
// of its tunnels is online (chosen at random among them); a static backend always does (a
// failed dial is the request's 502); an HTTP response backend always does; failover takes the
// first child that does; weighted chooses among the children that do, by weight (weight 0
// never). ok is false when nothing can take it.
func (s *Server) choose(b *plan.Backend, c conn) (target, bool) {
	if b == nil || b.Missing {
		return target{}, false
	}
	switch b.Kind {
	case plan.TunnelGroup:
		if s.cfg.Labeled == nil {
			return target{}, false
		}
		eps := s.cfg.Labeled(c.account, b.Labels)
		if len(eps) == 0 {
			return target{}, false
		}
		ep := eps[rand.IntN(len(eps))]
		return target{key: "t" + hashKey(ep.ID()), backend: b.ID, once: draining(ep), dial: func(ctx context.Context) (net.Conn, error) {
			return ep.Dial(ctx, c.clientAddr, c.proto, c.edgeType, c.passthrough)
		}}, true
	case plan.Static:
		addr, useTLS := b.Address, b.TLS
		return target{key: "s" + hashKey(addr+strconv.FormatBool(useTLS)), backend: b.ID, static: true, dial: func(ctx context.Context) (net.Conn, error) {
			return dialStatic(ctx, addr, useTLS, s.outboundOptions())
		}}, true
	case plan.HTTPResponse:
		return target{respond: b, backend: b.ID}, true
	case plan.Failover:
		for _, child := range b.Children {
			if t, ok := s.choose(child, c); ok {
				return t, true
			}
		}
	case plan.Weighted:
		children, weights := append([]*plan.Backend(nil), b.Children...), append([]int64(nil), b.Weights...)
		for len(children) > 0 {
			i := pickWeighted(weights)
			if i < 0 {
				break
			}
			if t, ok := s.choose(children[i], c); ok {
				return t, true
			}
			children = append(children[:i], children[i+1:]...)
			weights = append(weights[:i], weights[i+1:]...)
		}
	}
	return target{}, false
}

// pickWeighted returns an index chosen with probability proportional to its weight, or -1
// when every weight is 0.
func pickWeighted(weights []int64) int {
	var total int64
	for _, w := range weights {
		total += max(w, 0)
	}
	if total == 0 {
		return -1
	}
	n := rand.Int64N(total)
	for i, w := range weights {
		if w <= 0 {
			continue
		}
		if n < w {
			return i
		}
		n -= w
	}
	return -1
}

func hashKey(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return strconv.FormatUint(h.Sum64(), 36)
}

// staticDialTimeout bounds connecting to a static backend.
const staticDialTimeout = 10 * time.Second

// dialStatic connects to a static backend's address through the outbound guard o (an account
// chose the address: a non-public one is refused unless the operator allowed them), with TLS
// (verified for the address's host against o.Roots, nil for the system's) when the backend
// asks for it.
func dialStatic(ctx context.Context, addr string, useTLS bool, o outbound.Options) (net.Conn, error) {
	d := o.Dialer()
	d.Timeout = staticDialTimeout
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || !useTLS {
		return c, err
	}
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(c, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, RootCAs: o.Roots})
	hctx, cancel := context.WithTimeout(ctx, staticDialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS to static backend %s: %w", addr, err)
	}
	return tc, nil
}

// respond writes an HTTP response backend's answer.
func respond(w http.ResponseWriter, b *plan.Backend) {
	for k, v := range b.Headers {
		w.Header().Set(k, v)
	}
	status := b.Status
	if status < 100 || status > 999 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.Body))
}
