package edgeplane

import (
	"net/http"
	"net/netip"
	"sort"
	"strings"
)

// Backends say where an edge or route sends traffic. Five kinds, each its own collection under
// /backends; failover and weighted backends compose the others. A backend still referenced by a
// module or by another backend cannot be deleted (409 ERR_NGROK_6502).

// Limits of backends.
const (
	MaxWeight           = 10000
	MaxHTTPResponseBody = 64 << 10
)

func backendInUse(id string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeBackendInUse,
		Msg: "Backend " + id + " is still used by an edge, a route or another backend; remove those uses first."}
}

// backendKinds are the backend collections, for lookups by id prefix.
func backendKinds() []*Resource {
	return []*Resource{TunnelGroupBackends, StaticBackends, HTTPResponseBackends, FailoverBackends, WeightedBackends}
}

// --- tunnel group ------------------------------------------------------------------------------

// TunnelGroupBackend sends traffic to the agent tunnels whose labels match (schema
// "TunnelGroupBackend"). Tunnels is empty until agents connect, which edgeplane does not serve.
type TunnelGroupBackend struct {
	Meta
	Annotations
	Labels  map[string]string `json:"labels"`
	Tunnels []*Ref            `json:"tunnels"`
}

// TunnelGroupBackendBody is the body of POST and PATCH /backends/tunnel_group.
type TunnelGroupBackendBody struct {
	Echo
	AnnotationFields
	Labels map[string]string `json:"labels"`
}

// Validate checks label keys and values like the labels agents send.
func (b *TunnelGroupBackendBody) Validate() error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if err := maxEntries(CodeInvalid, "labels", len(b.Labels), MaxBackendLabels); err != nil {
		return err
	}
	for k, v := range b.Labels {
		if !labelPart(k) || k == "*" || !labelPart(v) || v == "*" {
			return Invalid(CodeInvalid, "labels", "%q=%q: keys and values are letters, digits, '.', '_' and '-'", k, v)
		}
	}
	return nil
}

// Create builds the backend.
func (b *TunnelGroupBackendBody) Create(op *Op) (Document, error) {
	d := &TunnelGroupBackend{Labels: map[string]string{}, Tunnels: []*Ref{}}
	return d, b.Apply(op, d)
}

// Apply replaces the labels when given.
func (b *TunnelGroupBackendBody) Apply(op *Op, doc Document) error {
	d := doc.(*TunnelGroupBackend)
	b.ApplyTo(&d.Annotations)
	if b.Labels != nil {
		d.Labels = b.Labels
	}
	return nil
}

// --- static address ----------------------------------------------------------------------------

// StaticBackend sends traffic to a fixed host:port (schema "StaticBackend").
type StaticBackend struct {
	Meta
	Annotations
	Address string           `json:"address"`
	TLS     StaticBackendTLS `json:"tls"`
}

// StaticBackendTLS says whether to speak TLS to the address; off by default.
type StaticBackendTLS struct {
	Enabled bool `json:"enabled"`
}

// StaticBackendBody is the body of POST and PATCH /backends/static.
type StaticBackendBody struct {
	Echo
	AnnotationFields
	Address *string `json:"address"`
	TLS     *struct {
		Enabled *bool `json:"enabled"`
	} `json:"tls"`
}

// Validate requires address to be host:port.
func (b *StaticBackendBody) Validate() error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if b.Address != nil && !validAddress(*b.Address) {
		return Invalid(CodeInvalid, "address", "%q is not host:port with a port from 1 to 65535", *b.Address)
	}
	return nil
}

// Create requires an address.
func (b *StaticBackendBody) Create(op *Op) (Document, error) {
	if b.Address == nil {
		return nil, Invalid(CodeInvalid, "address", "is required: host:port")
	}
	d := &StaticBackend{}
	return d, b.Apply(op, d)
}

// Apply changes what the body names.
func (b *StaticBackendBody) Apply(op *Op, doc Document) error {
	d := doc.(*StaticBackend)
	b.ApplyTo(&d.Annotations)
	if b.Address != nil {
		d.Address = *b.Address
	}
	if b.TLS != nil && b.TLS.Enabled != nil {
		d.TLS.Enabled = *b.TLS.Enabled
	}
	return nil
}

// validAddress: a hostname, IPv4 address or bracketed IPv6 address, a colon and a port.
func validAddress(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return false
	}
	host, port := s[:i], s[i+1:]
	if !validPort(port) {
		return false
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		return err == nil && a.Is6()
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return !strings.Contains(host, ":")
	}
	return ValidHostname(host, false) || strings.EqualFold(host, "localhost")
}

// --- HTTP response -----------------------------------------------------------------------------

// HTTPResponseBackend answers every request itself (schema "HTTPResponseBackend").
type HTTPResponseBackend struct {
	Meta
	Annotations
	Body       string            `json:"body"`
	Headers    map[string]string `json:"headers"`
	StatusCode int32             `json:"status_code"`
}

// HTTPResponseBackendBody is the body of POST and PATCH /backends/http_response.
type HTTPResponseBackendBody struct {
	Echo
	AnnotationFields
	Body       *string           `json:"body"`
	Headers    map[string]string `json:"headers"`
	StatusCode *int32            `json:"status_code"`
}

// Validate checks the status code, the body size and the headers.
func (b *HTTPResponseBackendBody) Validate() error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if b.StatusCode != nil && (*b.StatusCode < 100 || *b.StatusCode > 599) {
		return Invalid(CodeInvalid, "status_code", "must be from 100 to 599, got %d", *b.StatusCode)
	}
	if b.Body != nil && len(*b.Body) > MaxHTTPResponseBody {
		return Invalid(CodeInvalid, "body", "must be at most %d bytes", MaxHTTPResponseBody)
	}
	if err := maxEntries(CodeTooManyHeaders, "headers", len(b.Headers), MaxHeaderEntries); err != nil {
		return err
	}
	lower := make(map[string]string, len(b.Headers))
	for name, value := range b.Headers {
		if !validHeaderName(name) {
			return Invalid(CodeInvalid, "headers", "%q is not a valid HTTP header name", name)
		}
		// Names are stored lowercased: two that differ only in case would keep one value at random.
		if other, dup := lower[strings.ToLower(name)]; dup {
			return Invalid(CodeInvalid, "headers", "%q and %q are the same header name", min(name, other), max(name, other))
		}
		lower[strings.ToLower(name)] = name
		// The server frames the answer from the body and owns the connection: a
		// Content-Length or Transfer-Encoding served as given would corrupt the response.
		if why := FixedHeader(name); why != "" {
			return Invalid(CodeInvalid, "headers", "%q cannot be set on a response: %s", name, why)
		}
		if !validHeaderValue(value) {
			return Invalid(CodeInvalid, "headers", "the value of %q has characters not allowed in an HTTP header", name)
		}
	}
	return nil
}

// Create requires a status code.
func (b *HTTPResponseBackendBody) Create(op *Op) (Document, error) {
	if b.StatusCode == nil {
		return nil, Invalid(CodeInvalid, "status_code", "is required: 100 to 599")
	}
	d := &HTTPResponseBackend{Headers: map[string]string{}}
	return d, b.Apply(op, d)
}

// Apply changes what the body names; header names are stored lowercased, as HTTP/2 sends them.
func (b *HTTPResponseBackendBody) Apply(op *Op, doc Document) error {
	d := doc.(*HTTPResponseBackend)
	b.ApplyTo(&d.Annotations)
	if b.Body != nil {
		d.Body = *b.Body
	}
	if b.StatusCode != nil {
		d.StatusCode = *b.StatusCode
	}
	if b.Headers != nil {
		d.Headers = make(map[string]string, len(b.Headers))
		for k, v := range b.Headers {
			d.Headers[strings.ToLower(k)] = v
		}
	}
	return nil
}

// --- failover and weighted ---------------------------------------------------------------------

// FailoverBackend tries its backends in order (schema "FailoverBackend").
type FailoverBackend struct {
	Meta
	Annotations
	Backends []string `json:"backends"`
}

// References keeps the children from being deleted while in use.
func (d *FailoverBackend) References() []Reference { return restrictAll(d.Backends) }

// SerialUpdates makes updates of failover and weighted backends of one account take turns, so
// that the cycle check of each sees the others' children (see SerialUpdater).
func (d *FailoverBackend) SerialUpdates() {}

// FailoverBackendBody is the body of POST and PATCH /backends/failover.
type FailoverBackendBody struct {
	Echo
	AnnotationFields
	Backends []string `json:"backends"`
}

// Validate rejects repeated children.
func (b *FailoverBackendBody) Validate() error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if err := maxEntries(CodeInvalid, "backends", len(b.Backends), MaxChildBackends); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, id := range b.Backends {
		if seen[id] {
			return Invalid(CodeInvalid, "backends", "%q is listed twice", id)
		}
		seen[id] = true
	}
	return nil
}

// Create builds the backend.
func (b *FailoverBackendBody) Create(op *Op) (Document, error) {
	d := &FailoverBackend{Backends: []string{}}
	return d, b.Apply(op, d)
}

// Apply replaces the children when given: each must exist, and none may lead back to this one.
func (b *FailoverBackendBody) Apply(op *Op, doc Document) error {
	d := doc.(*FailoverBackend)
	b.ApplyTo(&d.Annotations)
	if b.Backends == nil {
		return nil
	}
	if err := checkChildren(op, b.Backends); err != nil {
		return err
	}
	d.Backends = b.Backends
	return nil
}

// WeightedBackend spreads traffic over its backends by weight (schema "WeightedBackend").
type WeightedBackend struct {
	Meta
	Annotations
	Backends map[string]int64 `json:"backends"`
}

// References keeps the children from being deleted while in use.
func (d *WeightedBackend) References() []Reference {
	ids := make([]string, 0, len(d.Backends))
	for id := range d.Backends {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return restrictAll(ids)
}

// SerialUpdates makes updates of failover and weighted backends of one account take turns, so
// that the cycle check of each sees the others' children (see SerialUpdater).
func (d *WeightedBackend) SerialUpdates() {}

// WeightedBackendBody is the body of POST and PATCH /backends/weighted.
type WeightedBackendBody struct {
	Echo
	AnnotationFields
	Backends map[string]int64 `json:"backends"`
}

// Validate checks the weights.
func (b *WeightedBackendBody) Validate() error {
	if err := b.AnnotationFields.Validate(); err != nil {
		return err
	}
	if err := maxEntries(CodeInvalid, "backends", len(b.Backends), MaxChildBackends); err != nil {
		return err
	}
	for id, w := range b.Backends {
		if w < 0 || w > MaxWeight {
			return Invalid(CodeInvalid, "backends", "the weight of %q must be from 0 to %d, got %d", id, MaxWeight, w)
		}
	}
	return nil
}

// Create builds the backend.
func (b *WeightedBackendBody) Create(op *Op) (Document, error) {
	d := &WeightedBackend{Backends: map[string]int64{}}
	return d, b.Apply(op, d)
}

// Apply replaces the children when given: each must exist, and none may lead back to this one.
func (b *WeightedBackendBody) Apply(op *Op, doc Document) error {
	d := doc.(*WeightedBackend)
	b.ApplyTo(&d.Annotations)
	if b.Backends == nil {
		return nil
	}
	ids := make([]string, 0, len(b.Backends))
	for id := range b.Backends {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if err := checkChildren(op, ids); err != nil {
		return err
	}
	d.Backends = b.Backends
	return nil
}

func restrictAll(ids []string) []Reference {
	refs := make([]Reference, len(ids))
	for i, id := range ids {
		refs[i] = Reference{To: id, Mode: RefRestrict}
	}
	return refs
}

// checkChildren requires each child to be a backend of the account and refuses a cycle: no child
// may be, or lead through failover and weighted backends to, the backend being written.
func checkChildren(op *Op, ids []string) error {
	for _, id := range ids {
		if id == op.ID {
			return Invalid(CodeInvalid, "backends", "a backend cannot contain itself")
		}
		if err := mustExist(op, id, "backends", CodeBackendMissing, "backend", backendKinds()); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	var walk func(id string) (bool, error)
	walk = func(id string) (bool, error) {
		if id == op.ID {
			return true, nil
		}
		if seen[id] {
			return false, nil
		}
		seen[id] = true
		var children []string
		switch {
		case strings.HasPrefix(id, FailoverBackends.Prefix+"_"):
			d, err := op.Tx.Get(FailoverBackends, id)
			if err != nil {
				return false, ignoreNotFound(err)
			}
			children = d.(*FailoverBackend).Backends
		case strings.HasPrefix(id, WeightedBackends.Prefix+"_"):
			d, err := op.Tx.Get(WeightedBackends, id)
			if err != nil {
				return false, ignoreNotFound(err)
			}
			for c := range d.(*WeightedBackend).Backends {
				children = append(children, c)
			}
		}
		for _, c := range children {
			if cyc, err := walk(c); cyc || err != nil {
				return cyc, err
			}
		}
		return false, nil
	}
	for _, id := range ids {
		cyc, err := walk(id)
		if err != nil {
			return err
		}
		if cyc {
			return Invalid(CodeInvalid, "backends", "%q leads back to this backend: backends cannot form a cycle", id)
		}
	}
	return nil
}

func ignoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}
