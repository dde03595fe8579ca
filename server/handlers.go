package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// collection is a resource table entry with what the handlers derive from it once at startup.
type collection struct {
	res *ep.Resource
	// parentParam is the name of the path segment holding the parent id ("edge_id"), or "".
	parentParam string
	// listKey is the JSON-quoted list key, ready for the envelope.
	listKey []byte
	// embeds is the collection of the children its documents show, or nil.
	embeds *collection
	// live is set for the live collections (agent sessions and tunnels), whose objects the store
	// reads from the rows of online agents rather than from stored documents.
	live bool
	// sizes are the largest documents of the collection the server has seen, per account.
	sizes docSizes
}

func newCollection(res *ep.Resource) *collection {
	c := &collection{res: res, listKey: []byte(quote(res.ListKey))}
	if i := strings.Index(res.Path, "{"); i >= 0 {
		c.parentParam = res.Path[i+1 : i+strings.Index(res.Path[i:], "}")]
	}
	return c
}

// path is the collection path with the parent id filled in.
func (c *collection) path(parentID string) string {
	if c.parentParam == "" {
		return c.res.Path
	}
	return strings.Replace(c.res.Path, "{"+c.parentParam+"}", parentID, 1)
}

// childKey is the JSON-quoted key under which the collection's documents show their children,
// or nil when they show none.
func (c *collection) childKey() []byte {
	if c.embeds == nil {
		return nil
	}
	return c.embeds.listKey
}

func (c *collection) objectPath(parentID, id string) string { return c.path(parentID) + "/" + id }

// objectID is the id of the request's path; an id with the collection's old prefix names the
// object it was migrated to (ep.Resource.CanonicalID).
func (c *collection) objectID(r *http.Request) string { return c.res.CanonicalID(r.PathValue("id")) }

func (c *collection) parentID(r *http.Request) string {
	if c.parentParam == "" {
		return ""
	}
	return r.PathValue(c.parentParam)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, c *collection) error {
	parent := c.parentID(r)
	body := c.res.NewCreate()
	if err := s.decode(r, body, "", parent); err != nil {
		return err
	}
	if err := body.Validate(); err != nil {
		return err
	}
	doc, err := s.store.Create(r.Context(), callerOf(r), c.res, parent, body)
	if err != nil {
		return err
	}
	s.resolve(c, parent, doc)
	c.sizes.saw(callerOf(r).AccountID, s.writeJSON(w, http.StatusCreated, doc))
	return nil
}

// get authenticates and reads in one query (the route is fused: see authenticated). An object the
// store's read cache holds is rendered once and answered from that body while it is unchanged.
// The rendering takes its share of the response budget: an object that embeds its children (an
// HTTPS edge, up to ep.MaxHTTPSEdgeResponseBytes) before it is read, any other before its JSON
// is made. An object that embeds is read after a separate authentication, so that only key
// holders take (or wait for) a share that large.
func (s *Server) get(w http.ResponseWriter, r *http.Request, c *collection) error {
	var hold *budgetHold
	defer func() { hold.release() }()
	parent, cred := c.parentID(r), credentialFrom(r)
	admitted := false
	if c.embeds != nil {
		caller, err := s.store.Authenticate(r.Context(), cred.selector, cred.secret)
		if !s.admit(w, r, caller, err) {
			return nil
		}
		admitted = true
		if hold, err = s.takeBudget(w, r, s.docBound(c)); err != nil {
			return err
		}
	}
	caller, doc, rendered, err := s.store.AuthenticateGet(r.Context(), cred.selector, cred.secret, c.res, parent, c.objectID(r), s.base)
	if caller.AccountID == "" {
		s.admit(w, r, caller, err) // err is the authentication's
		return nil
	}
	if !admitted && !s.admit(w, r, caller, nil) {
		return nil
	}
	if err != nil {
		return err
	}
	if doc == nil {
		hold.release() // the body is the cache's, already made
		body := rendered.Body(s.base)
		c.sizes.saw(caller.AccountID, len(body))
		s.writeBody(w, http.StatusOK, body)
		return nil
	}
	if hold == nil {
		if hold, err = s.takeBudget(w, r, s.docBound(c)); err != nil {
			return err
		}
	}
	s.resolve(c, parent, doc)
	if c.embeds != nil {
		return s.getEmbedder(w, caller.AccountID, c, doc, hold, rendered)
	}
	body, err := s.encode(doc)
	if err != nil {
		return err
	}
	hold.resize(int64(len(body)))
	c.sizes.saw(caller.AccountID, len(body))
	if rendered != nil {
		rendered.Store(s.base, body)
	}
	s.writeBody(w, http.StatusOK, body)
	return nil
}

// getEmbedder answers the GET of a document that shows its children, rendered a child at a time
// (see addDoc) and sent in parts: up to ep.MaxHTTPSEdgeResponseBytes, never copied whole unless
// it is small enough for the read cache to keep.
func (s *Server) getEmbedder(w http.ResponseWriter, account string, c *collection, doc ep.Document, hold *budgetHold, rendered *store.Rendered) error {
	var body parts
	if _, err := addDoc(&body, doc, c.childKey(), false); err != nil {
		return err
	}
	body.add([]byte{'\n'})
	hold.resize(int64(body.size))
	c.sizes.saw(account, body.size)
	if rendered.Fits(body.size) {
		b := body.bytes()
		rendered.Store(s.base, b)
		s.writeBody(w, http.StatusOK, b)
		return nil
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(body.size)}
	w.WriteHeader(http.StatusOK)
	body.writeTo(w)
	return nil
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, c *collection) error {
	parent, id := c.parentID(r), c.objectID(r)
	body := c.res.NewUpdate()
	if err := s.decode(r, body, id, parent); err != nil {
		return err
	}
	if err := body.Validate(); err != nil {
		return err
	}
	doc, err := s.store.Update(r.Context(), callerOf(r), c.res, parent, id, body.Apply)
	if err != nil {
		return err
	}
	s.resolve(c, parent, doc)
	c.sizes.saw(callerOf(r).AccountID, s.writeJSON(w, http.StatusOK, doc))
	return nil
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, c *collection) error {
	if err := s.store.Delete(r.Context(), callerOf(r), c.res, c.parentID(r), c.objectID(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Paging limits.
const (
	MaxLimit     = 100
	DefaultLimit = 100
)

// paging reads limit (1..100, default 100) and the exclusive before_id cursor, also spelled
// beforeId by one client; an empty cursor means the first page. A cursor must have the shape of
// an id of the listed collection (with its prefix, or its old one): anything else (garbage, a truncated
// id, an id of another collection) would silently page from the wrong place, so it is a 400
// naming the parameter as the client spelled it.
func paging(r *http.Request, res *ep.Resource) (limit int, before string, explicit bool, err error) {
	prefix := res.Prefix
	q := r.URL.Query()
	limit = DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, convErr := strconv.Atoi(v)
		if convErr != nil || n < 1 || n > MaxLimit {
			return 0, "", false, &ep.Error{Status: http.StatusBadRequest, Code: ep.CodeBadLimit, Field: "limit",
				Msg: "limit: must be a whole number from 1 to 100, got " + quote(v)}
		}
		limit, explicit = n, true
	}
	param := "before_id"
	before = q.Get(param)
	if before == "" {
		param = "beforeId"
		before = q.Get(param)
	}
	before = res.CanonicalID(before) // a cursor taken before a migration of the prefix
	if before != "" && !ep.ValidID(prefix, before) {
		return 0, "", false, &ep.Error{Status: http.StatusBadRequest, Code: ep.CodeInvalid, Field: param,
			Msg: param + ": must be the id of an object of the list (" + prefix + "_…), got " + quote(shorten(before))}
	}
	return limit, before, explicit, nil
}

// shorten cuts a value quoted in an error message to its first 64 bytes (on a rune boundary).
func shorten(v string) string {
	const most = 64
	if len(v) <= most {
		return v
	}
	i := most
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i] + "…"
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, c *collection) error {
	limit, before, explicit, err := paging(r, c.res)
	if err != nil {
		return err
	}
	// The page's share of the response budget before it is read (see pageShare); once it is
	// rendered, its size is held while it is written.
	account := callerOf(r).AccountID
	hold, err := s.takeBudget(w, r, s.pageShare(account, c, limit))
	if err != nil {
		return err
	}
	defer hold.release()
	parent := c.parentID(r)
	var (
		docs []ep.Document
		more bool
	)
	if c.live {
		docs, more, err = s.store.ListLive(r.Context(), c.res, callerOf(r).AccountID, before, limit)
	} else {
		docs, more, err = s.store.List(r.Context(), callerOf(r).AccountID, c.res, parent, before, limit)
	}
	if err != nil {
		return err
	}
	for _, d := range docs {
		s.resolve(c, parent, d)
	}
	listURI := s.base + c.path(parent)
	var next any // null on the last page, and on an empty page
	if more && len(docs) > 0 {
		q := url.Values{"before_id": {docs[len(docs)-1].Base().ID}}
		if explicit {
			q.Set("limit", strconv.Itoa(limit))
		}
		next = listURI + "?" + q.Encode()
	}
	tail, _ := json.Marshal(struct {
		URI         string `json:"uri"`
		NextPageURI any    `json:"next_page_uri"`
	}{listURI, next})
	// {"<list key>": [...], "uri": ..., "next_page_uri": ...}: each document is rendered on its
	// own and let go, and the parts are written in turn rather than copied into one body, so
	// that a page of megabytes is held about once, not three times.
	var body parts
	body.add([]byte{'{'})
	body.add(c.listKey)
	if docs == nil {
		body.add([]byte(":null"))
	} else {
		body.add([]byte(":["))
		for i, d := range docs {
			if i > 0 {
				body.add([]byte{','})
			}
			n, err := addDoc(&body, d, c.childKey(), true)
			if err != nil {
				return err
			}
			c.sizes.saw(account, n)
			docs[i] = nil
		}
		body.add([]byte{']'})
	}
	tail[0] = ','
	body.add(append(tail, '\n'))
	hold.resize(int64(body.size))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(body.size))
	w.WriteHeader(http.StatusOK)
	body.writeTo(w)
	return nil
}
