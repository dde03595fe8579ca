package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/netx"
	"github.com/edgeplane/edgeplane/internal/serving"
	"github.com/edgeplane/edgeplane/store"
)

type ctxKey int

const (
	opKey ctxKey = iota
)

// opInfo is per-request state: the outer layer reads back the operation id and account for the
// log line, and the authentication middleware leaves the caller (or, for fused routes, the
// credential) here for the handler. It travels in the request's context from observe on, so
// handing something to the handler costs no copy of the request and no context of its own.
type opInfo struct {
	id      string
	account string
	caller  ep.Caller
	cred    credential
}

// statusWriter remembers the status code for the log line.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// requestLogger is a log handler that writes the request line without a slog record (see
// serving.NewLogger); it reports false when it leaves the line to the handler's Handle.
type requestLogger interface {
	LogRequest(*serving.RequestLine) bool
}

// requestState is what observe makes for every request, in one allocation: its context (with
// the request deadline and the opInfo as the value of opKey), its opInfo and the writer that
// remembers the status. Each had been an allocation of its own, and handing the context on had
// copied the request twice (observe's value, then authenticated's deadline).
type requestState struct {
	ctx  deadlineCtx
	info opInfo
	sw   statusWriter
	// opHeader is the Ngrok-Operation-Id header's value slice.
	opHeader [1]string
}

// observe gives the request its operation id (sent back in Ngrok-Operation-Id and in every error
// body), turns a panic into a 500 that shows no internals, and logs one line per request. Its
// context carries the request deadline from here on (see Config.RequestTimeout), so that the
// authentication middleware needs no context of its own.
func (s *Server) observe(w http.ResponseWriter, r *http.Request, next http.Handler) {
	start := time.Now()
	if s.metrics != nil {
		s.metrics.inFlight.Inc()
		defer s.metrics.inFlight.Dec()
	}
	id := ep.NewOperationID()
	st := &requestState{}
	st.info.id = id
	info, sw := &st.info, &st.sw
	sw.ResponseWriter = w
	st.ctx.parent, st.ctx.deadline, st.ctx.info = r.Context(), start.Add(s.timeout), info
	if p, ok := st.ctx.parent.Deadline(); ok && p.Before(st.ctx.deadline) {
		st.ctx.deadline = p
	}
	defer st.ctx.release()
	// Assigned, not Set: the name is canonical already, and Set canonicalizes it again (and
	// allocates the value's slice, which the request's state holds).
	st.opHeader[0] = id
	w.Header()["Ngrok-Operation-Id"] = st.opHeader[:]
	r = r.WithContext(&st.ctx)
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic", "operation_id", id, "panic", v, "stack", string(debug.Stack()))
			if sw.status == 0 {
				s.fail(sw, r, internalError())
			}
		}
		end := time.Now() // one clock read for the duration and the log record's time
		elapsed := end.Sub(start)
		s.metrics.observe(r.Pattern, r.Method, sw.status, elapsed)
		// The record is handed to the handler directly: Logger.LogAttrs would also capture the
		// caller's program counter, which no request line shows, at a few percent of a GET. A
		// handler that writes request lines itself (serve's) is given the line without a record.
		if h := s.log.Handler(); h.Enabled(r.Context(), slog.LevelInfo) {
			line := serving.RequestLine{Time: end, Msg: "request", OperationID: id, Method: r.Method, Route: r.Pattern,
				Status: sw.status, DurationMS: float64(elapsed.Microseconds()) / 1000, AccountID: info.account}
			if s.lines == nil || !s.lines.LogRequest(&line) {
				_ = h.Handle(r.Context(), line.Record())
			}
		}
	}()
	if s.cors.handle(sw, r) {
		return // a CORS preflight, answered
	}
	next.ServeHTTP(sw, r)
}

func opOf(r *http.Request) *opInfo {
	if o, ok := r.Context().Value(opKey).(*opInfo); ok {
		return o
	}
	return &opInfo{}
}

func callerOf(r *http.Request) ep.Caller {
	return opOf(r).caller
}

// authenticated checks the version header and the bearer token before next runs. With fused set,
// next checks the token itself, in the same query as its read (see Server.get): the middleware
// parses the token and hands it on as a credential, and next must call admit with the result.
func (s *Server) authenticated(next http.Handler, fused bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		info, ok := ctx.Value(opKey).(*opInfo)
		if !ok { // not through observe (a handler served on its own): the handler still gets its caller and deadline
			var release func()
			ctx, release = withLazyDeadline(ctx, time.Now().Add(s.timeout))
			defer release()
			info = &opInfo{}
			ctx = context.WithValue(ctx, opKey, info)
			r = r.WithContext(ctx)
		}
		if err := checkVersion(r); err != nil {
			s.fail(w, r, err)
			return
		}
		cred, err := credentialOf(r)
		if err != nil {
			s.admit(w, r, ep.Caller{}, err)
			return
		}
		if s.gate != nil {
			// Beyond the database's connections, requests wait here in arrival order (a
			// channel's waiting senders are served first come, first served), not in
			// database/sql, which serves its waiters at random.
			select {
			case s.gate <- struct{}{}:
				defer func() { <-s.gate }()
			case <-ctx.Done():
				s.fail(w, r, ep.Unavailable())
				return
			}
		}
		if fused {
			info.cred = cred
			next.ServeHTTP(w, r)
			return
		}
		caller, err := s.store.Authenticate(ctx, cred.selector, cred.secret)
		if !s.admit(w, r, caller, err) {
			return
		}
		info.caller = caller
		next.ServeHTTP(w, r)
	})
}

// admit finishes authentication with its result: an error is answered (with WWW-Authenticate), and
// an authenticated caller is logged and held to the rate limit. It reports whether the request
// may go on.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, caller ep.Caller, err error) bool {
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="edgeplane"`)
		s.fail(w, r, authError(err))
		return false
	}
	opOf(r).account = caller.AccountID
	// The connection now belongs to a key holder: it keeps the full idle timeout.
	netx.TrustContext(r.Context())
	if s.limiter != nil {
		if ok, retry := s.limiter.allow(caller.KeyID, time.Now()); !ok {
			if s.metrics != nil {
				s.metrics.rateLimited.Inc()
			}
			w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(retry)))
			s.fail(w, r, rateLimited(retry))
			return false
		}
	}
	return true
}

// authError words the store's refusals of a presented key as the API's 401s; any other error
// (the database unreachable, a malformed credential already worded) passes unchanged.
func authError(err error) error {
	switch {
	case errors.Is(err, store.ErrUnknownKey):
		return &ep.Error{Status: http.StatusUnauthorized, Code: ep.CodeAuthUnknown,
			Msg: "The API key is not valid: it is unknown or has been deleted."}
	case errors.Is(err, store.ErrInactiveKey):
		return &ep.Error{Status: http.StatusUnauthorized, Code: ep.CodeAuthInactive,
			Msg: "The bot user that owns this API key is inactive."}
	}
	return err
}

// checkVersion requires API version 2 in Ngrok-Version (what existing clients send) or
// Service-Version (the spec's neutral name).
func checkVersion(r *http.Request) *ep.Error {
	v := canonicalHeader(r.Header, "Ngrok-Version")
	if v == "" {
		v = canonicalHeader(r.Header, "Service-Version")
	}
	switch strings.TrimSpace(v) {
	case "2":
		return nil
	case "":
		return &ep.Error{Status: http.StatusBadRequest, Code: ep.CodeNoVersion,
			Msg: "The Ngrok-Version header is required; send \"Ngrok-Version: 2\"."}
	default:
		return &ep.Error{Status: http.StatusBadRequest, Code: ep.CodeBadVersion,
			Msg: "Unsupported API version " + quote(v) + " in the version header; this server speaks version 2."}
	}
}

// credential is a bearer token as presented, parsed but not yet checked against the store.
type credential struct{ selector, secret string }

// credentialOf parses the Authorization header; its errors are 401s that need no database.
func credentialOf(r *http.Request) (credential, error) {
	return parseCredential(canonicalHeader(r.Header, "Authorization"))
}

// canonicalHeader is h.Get(name) for a name already in canonical form, which Get would put in
// it again, byte by byte, on every request.
func canonicalHeader(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// parseCredential parses an Authorization header's value.
func parseCredential(h string) (credential, error) {
	if h == "" {
		return credential{}, &ep.Error{Status: http.StatusUnauthorized, Code: ep.CodeAuthMissing,
			Msg: "Authentication is required: send \"Authorization: Bearer <API key token>\"."}
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return credential{}, &ep.Error{Status: http.StatusUnauthorized, Code: ep.CodeAuthMalformed,
			Msg: "The Authorization header must be \"Bearer <API key token>\"."}
	}
	if ep.ValidID(ep.APIKeys.Prefix, token) {
		return credential{}, &ep.Error{Status: http.StatusUnauthorized, Code: ep.CodeAuthKeyID,
			Msg: "That is the id of an API key, not its token; authenticate with the token shown when the key was created."}
	}
	selector, secret, ok := ep.ParseToken(token)
	if !ok {
		return credential{}, &ep.Error{Status: http.StatusUnauthorized, Code: ep.CodeAuthMalformed,
			Msg: "The bearer token is not in the format of an API key token."}
	}
	return credential{selector, secret}, nil
}

// credentialFrom returns the credential the middleware handed to a fused route.
func credentialFrom(r *http.Request) credential {
	return opOf(r).cred
}
