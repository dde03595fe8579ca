package enforce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/outbound"
	"github.com/edgeplane/edgeplane/trafficpolicy"
)

// The http-request action makes the HTTP request its configuration describes (URL, method,
// query parameters, headers and body rendered with CEL interpolation) and records the answer as
// actions.ngrok.http_request (req, res with the body, attempts, error) for the rules after it.
// The request goes through the data plane's outbound client (PolicyOptions.Outbound), the one
// that fetches the URLs an account configures: its dialer refuses loopback, private and
// metadata addresses unless the operator allowed them. Within the action's timeout (3 s by
// default, the whole of it, retries included) it follows up to max_redirects redirects (none
// by default: a 3xx is the answer), retries up to three times while retry_condition holds, and
// reads at most MaxHTTPRequestBody of an answer. A failure (the answer too large
// ERR_NGROK_3601, the timeout ERR_NGROK_3602, too many redirects ERR_NGROK_3214, a loop
// ERR_NGROK_3603, any other) is recorded in actions.ngrok.http_request.error, and the policy
// goes on, unless on_error is halt: then the request is answered 502 with the code.
//
// A *.internal URL reaches the account's internal endpoint in process
// (trafficpolicy_httprequest_internal.go). Each request carries Ngrok-Req-Type: http-request and a
// hop count: a request that already went through three http-request actions does not make
// another (a policy calling its own endpoint would otherwise loop).
const (
	MaxHTTPRequestBody = 256 << 10
	maxHTTPRetries     = 3
	maxHTTPHops        = 3
	hopHeader          = "Ngrok-Req-Hops"
)

func init() {
	registerRequestAction("http-request", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (requestFunc, error) {
		h, err := newHTTPRequester(a, cfg.(*trafficpolicy.HTTPRequestConfig), tp)
		if err != nil {
			return nil, err
		}
		return func(w http.ResponseWriter, r *http.Request, vars func() map[string]any) *http.Request {
			if code, err := h.run(r, vars()); err != nil && h.halt {
				ErrorPage(w, r, http.StatusBadGateway, code, fmt.Sprintf("The http-request action %s failed: %v", a.Path, err))
				return nil
			}
			return r
		}, nil
	})
	registerResponseAction("http-request", func(a *trafficpolicy.Action, cfg any, tp *TrafficPolicy) (responseFunc, error) {
		h, err := newHTTPRequester(a, cfg.(*trafficpolicy.HTTPRequestConfig), tp)
		if err != nil {
			return nil, err
		}
		return func(w *policyWriter, vars map[string]any) (bool, error) {
			if code, err := h.run(w.req, vars); err != nil && h.halt {
				clear(w.Header())
				w.status = http.StatusBadGateway
				ErrorPage(w.ResponseWriter, w.req, http.StatusBadGateway, code, fmt.Sprintf("The http-request action %s failed: %v", a.Path, err))
				return true, nil
			}
			return false, nil
		}, nil
	})
}

// httpRequester is an http-request action made ready.
type httpRequester struct {
	path          string
	url, body     *trafficpolicy.Template
	method        string
	query         []queryTemplate
	headers       headerTemplates
	redirects     int
	timeout       time.Duration
	retry         *trafficpolicy.Condition
	halt, results bool
	client        *http.Client
	errRedirects  error
	// internal is set when the client reaches the account's internal endpoints.
	internal bool
}

type queryTemplate struct {
	key   string
	value *trafficpolicy.Template
}

func newHTTPRequester(a *trafficpolicy.Action, c *trafficpolicy.HTTPRequestConfig, tp *TrafficPolicy) (*httpRequester, error) {
	if tp.opts.Outbound == nil {
		return nil, fmt.Errorf("%s: http-request needs the data plane's outbound HTTP client, which this stage was built without", a.Path)
	}
	h := &httpRequester{path: a.Path, method: c.Method, redirects: c.Redirects(), halt: c.Halts(), results: tp.results}
	if h.method == "" {
		h.method = http.MethodGet
	}
	h.timeout, _ = c.Deadline()
	var err error
	if h.url, err = trafficpolicy.CompileTemplate(a.Phase, c.URL); err != nil {
		return nil, fmt.Errorf("%s.config.url: %v", a.Path, err)
	}
	if h.body, err = trafficpolicy.CompileTemplate(a.Phase, c.Body); err != nil {
		return nil, fmt.Errorf("%s.config.body: %v", a.Path, err)
	}
	for i, q := range c.QueryParams {
		t, err := trafficpolicy.CompileTemplate(a.Phase, q.Value)
		if err != nil {
			return nil, fmt.Errorf("%s.config.query_params[%d].value: %v", a.Path, i, err)
		}
		h.query = append(h.query, queryTemplate{q.Key, t})
	}
	if h.headers, err = compileHeaders(a, c.Headers); err != nil {
		return nil, err
	}
	if c.RetryCondition != "" {
		if h.retry, err = trafficpolicy.CompileRetryCondition(c.RetryCondition); err != nil {
			return nil, fmt.Errorf("%s.config.retry_condition: %v", a.Path, err)
		}
	}
	h.errRedirects = fmt.Errorf("exceeded maximum number of redirects %d", h.redirects)
	client := *tp.opts.Outbound // its transport, with the guard in its dialer
	client.Timeout = 0          // the action's context bounds the whole of it
	client.Jar = nil
	client.CheckRedirect = func(_ *http.Request, via []*http.Request) error {
		if h.redirects == 0 {
			return http.ErrUseLastResponse
		}
		if len(via) > h.redirects {
			return h.errRedirects
		}
		return nil
	}
	if tp.opts.Internal != nil && tp.opts.Endpoint != nil && tp.opts.Endpoint.Account != "" {
		base := client.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		client.Transport = &internalTransport{base: base, internal: tp.opts.Internal, account: tp.opts.Endpoint.Account}
		h.internal = true
	}
	h.client = &client
	return h, nil
}

// actionError is a failure of the action with its ngrok code.
type actionError struct {
	code int
	msg  string
}

func (e *actionError) Error() string { return e.msg }

// run makes the request for r with its variables, records the results when some rule reads
// them, and returns the failure, if any, with its code.
func (h *httpRequester) run(r *http.Request, vars map[string]any) (int, error) {
	res := map[string]any{}
	code, err := h.do(r, vars, res)
	if err != nil {
		res["error"] = map[string]any{"code": errorCode(code), "message": err.Error()}
	}
	if h.results {
		trafficpolicy.SetResult(vars, "http_request", res)
	}
	return code, err
}

func (h *httpRequester) do(in *http.Request, vars map[string]any, res map[string]any) (int, error) {
	hops, _ := strconv.Atoi(in.Header.Get(hopHeader))
	if hops >= maxHTTPHops {
		return 3603, errors.New("request rejected: a loop was detected (the request already went through three http-request actions)")
	}
	target, err := h.url.Render(vars)
	if err == nil {
		err = trafficpolicy.CheckRequestURL(target)
	}
	if err != nil {
		return 3900, fmt.Errorf("the url: %v", err)
	}
	u, _ := url.Parse(target)
	if isInternal(u.Hostname()) && !h.internal {
		return 3210, fmt.Errorf("%s: this policy cannot reach internal endpoints (it was built without its account's)", u.Host)
	}
	q := u.Query()
	for _, qt := range h.query {
		v, err := qt.value.Render(vars)
		if err != nil {
			return 3900, fmt.Errorf("query_params %s: %v", qt.key, err)
		}
		q.Add(qt.key, v)
	}
	u.RawQuery = q.Encode()
	body, err := h.body.Render(vars)
	if err != nil {
		return 3900, fmt.Errorf("the body: %v", err)
	}
	header := http.Header{}
	if err := h.headers.render(vars, header.Set); err != nil {
		return 3900, fmt.Errorf("the headers: %v", err)
	}
	if header.Get("User-Agent") == "" {
		header.Set("User-Agent", "edgeplane")
	}
	header.Set("Ngrok-Req-Type", "http-request")
	header.Set(hopHeader, strconv.Itoa(hops+1))
	if ip := ClientAddr(in); ip.IsValid() {
		header.Set("X-Forwarded-For", ip.String())
	}
	res["req"] = map[string]any{"method": h.method, "url": u.String(), "header": lowerHeader(header), "body": body}

	ctx, cancel := context.WithTimeout(context.WithValue(in.Context(), internalClientKey{}, in.RemoteAddr), h.timeout)
	defer cancel()
	var attempts []any
	for n := 1; ; n++ {
		last, code, err := h.attempt(ctx, u.String(), header, body)
		if err != nil {
			last["error"] = err.Error()
		} else {
			res["res"] = last["res"]
			attempts = append(attempts, last["attempt"])
		}
		res["attempts"] = attempts
		if ctx.Err() != nil {
			return 3602, fmt.Errorf("the configured timeout of %s was reached before a successful request could be made", h.timeout)
		}
		retry := false
		if h.retry != nil && n <= maxHTTPRetries {
			last["req"] = res["req"]
			if retry, err = h.retry.Retry(n, last); err != nil {
				return 3900, fmt.Errorf("retry_condition: %v", err)
			}
		}
		if !retry {
			if err != nil {
				return code, err
			}
			return 0, nil
		}
	}
}

// attempt makes one request; last is what retry_condition sees of it (res and attempt when it
// was answered).
func (h *httpRequester) attempt(ctx context.Context, target string, header http.Header, body string) (map[string]any, int, error) {
	last := map[string]any{"error": ""}
	var remote string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if a := i.Conn.RemoteAddr(); a != nil {
			if ap, err := netip.ParseAddrPort(a.String()); err == nil {
				remote = ap.Addr().Unmap().String()
			}
		}
	}}
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), h.method, target, rb)
	if err != nil {
		return last, 3210, err
	}
	req.Header = header.Clone()
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(err, h.errRedirects) {
			return last, 3214, h.errRedirects
		}
		if errors.Is(err, errInternalOffline) {
			return last, 3200, fmt.Errorf("%s: %v", req.URL.Host, errInternalOffline)
		}
		if r, ok := outbound.Refused(err); ok {
			return last, 3210, fmt.Errorf("%s %s was refused: %s (--outbound-allow-private)", h.method, req.URL.Redacted(), r.Reason())
		}
		return last, 3210, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxHTTPRequestBody+1))
	if err != nil {
		return last, 3210, fmt.Errorf("reading the answer: %v", err)
	}
	if len(b) > MaxHTTPRequestBody {
		return last, 3601, fmt.Errorf("response size exceeded: the answer is larger than %d bytes", MaxHTTPRequestBody)
	}
	ms := strconv.FormatInt(time.Since(start).Milliseconds(), 10)
	hdr := lowerHeader(resp.Header)
	last["res"] = map[string]any{"resolved_ip": remote, "header": hdr, "status_code": int64(resp.StatusCode),
		"statusCode": int64(resp.StatusCode), "time_ms": ms, "body": string(b)}
	last["attempt"] = map[string]any{"resolved_ip": remote, "response_header": hdr, "response_status_code": int64(resp.StatusCode), "response_time_ms": ms}
	return last, 0, nil
}

// lowerHeader is a header as the variables show one: lower-case names to lists of values.
func lowerHeader(h http.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, v := range h {
		out[strings.ToLower(k)] = append([]string(nil), v...)
	}
	return out
}
