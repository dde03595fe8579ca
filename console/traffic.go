package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/inspect"
)

// The traffic inspector's pages and data calls. Every entry is looked up within the signed-in
// key's account: an id of another account's entry is not found.

var noFilter inspect.Filter

// pageSize is how many entries the traffic page lists at once.
const pageSize = 100

// filterOf reads the filter from a request's query.
func filterOf(q url.Values) inspect.Filter {
	clip := func(s string) string {
		s = strings.TrimSpace(s)
		if len(s) > 256 {
			s = s[:256]
		}
		return s
	}
	f := inspect.Filter{Status: clip(q.Get("status")), Host: clip(q.Get("host")), Path: clip(q.Get("path")), Kind: clip(q.Get("kind"))}
	switch f.Kind {
	case "", inspect.KindHTTP, inspect.KindHTTPS, inspect.KindTLS, inspect.KindTCP:
	default:
		f.Kind = ""
	}
	return f
}

// query is a filter as a query string.
func query(f inspect.Filter) string {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "host": f.Host, "path": f.Path, "kind": f.Kind} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// summary is an entry as the list and the live view show it.
type summary struct {
	ID         uint64  `json:"id"`
	Replica    string  `json:"replica"`
	Time       string  `json:"time"`
	Kind       string  `json:"kind"`
	Client     string  `json:"client"`
	Host       string  `json:"host"`
	Method     string  `json:"method"`
	Path       string  `json:"path"`
	Status     int     `json:"status"`
	Upgraded   bool    `json:"upgraded,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	BytesIn    int64   `json:"bytes_in"`
	BytesOut   int64   `json:"bytes_out"`
	Target     string  `json:"target"`
	ErrorCode  string  `json:"error_code,omitempty"`
	Note       string  `json:"note,omitempty"`
	URL        string  `json:"url"`
}

func summarize(e *inspect.Entry) summary {
	return summary{ID: e.ID, Replica: e.Replica, Time: e.Time.UTC().Format("15:04:05.000"), Kind: e.Kind, Client: e.Client,
		Host: e.Host, Method: e.Method, Path: e.Path, Status: e.Status, Upgraded: e.Upgraded, DurationMS: e.DurationMS(),
		BytesIn: e.BytesIn, BytesOut: e.BytesOut, Target: target(e), ErrorCode: e.ErrorCode, Note: e.Note, URL: entryURL(e)}
}

// target names what took the traffic: the endpoint, or the edge (and route).
func target(e *inspect.Entry) string {
	switch {
	case e.EndpointProto != "":
		return e.EndpointURL()
	case e.Route != "":
		return e.Edge + " › " + e.Route
	}
	return e.Edge
}

func entryURL(e *inspect.Entry) string {
	return Prefix + "traffic/" + url.PathEscape(e.Replica) + "/" + strconv.FormatUint(e.ID, 10)
}

// trafficData is the traffic page.
type trafficData struct {
	On          bool
	Entries     []summary
	Filter      inspect.Filter
	Query       string
	Older       string
	Bodies      bool
	Limit       int
	LimitBytes  string
	Replica     string
	FilterEmpty bool
}

func (h *Handler) traffic(w http.ResponseWriter, r *http.Request, s *session) error {
	d := trafficData{Filter: filterOf(r.URL.Query()), Replica: h.cfg.Replica}
	d.Query, d.FilterEmpty = query(d.Filter), d.Filter.Empty()
	if h.cfg.Traffic != nil {
		d.On, d.Limit, d.LimitBytes = true, h.cfg.Entries, humanBytes(h.cfg.AccountBytes)
		d.Bodies = h.cfg.Traffic.Bodies(s.caller.AccountID)
		before, _ := strconv.ParseUint(r.URL.Query().Get("before"), 10, 64)
		entries := h.cfg.Traffic.List(s.caller.AccountID, d.Filter, before, pageSize+1)
		if len(entries) > pageSize {
			entries = entries[:pageSize]
			q, _ := url.ParseQuery(d.Query)
			q.Set("before", strconv.FormatUint(entries[len(entries)-1].ID, 10))
			d.Older = Prefix + "traffic?" + q.Encode()
		}
		for _, e := range entries {
			d.Entries = append(d.Entries, summarize(e))
		}
	}
	h.render(w, r, s, "traffic", http.StatusOK, d)
	return nil
}

// lookup returns the signed-in account's entry the path names.
func (h *Handler) lookup(r *http.Request, s *session) (*inspect.Entry, error) {
	if h.cfg.Traffic == nil {
		return nil, notFound("The traffic inspector is off on this server.")
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, notFound("No traffic entry has that id.")
	}
	e := h.cfg.Traffic.Get(s.caller.AccountID, r.PathValue("replica"), id)
	if e == nil {
		return nil, notFound("No traffic entry of your account has that id here: it was never recorded, was recorded by another replica, or older traffic has taken its place.")
	}
	return e, nil
}

// header is one header line as the detail shows it.
type header struct {
	Name, Value string
	Redacted    bool
}

// headerLines lists a recorded header sorted by name, marking redacted values.
func headerLines(h inspect.Header) []header {
	var out []header
	for _, f := range h.Sorted() {
		out = append(out, header{Name: f.Name, Value: f.Value, Redacted: f.Value == inspect.RedactedValue && inspect.Redacted(f.Name)})
	}
	return out
}

// entryData is the detail page.
type entryData struct {
	E          *inspect.Entry
	Target     string
	ReqHeader  []header
	RespHeader []header
	Replay     replayForm
}

// replayForm is the editable replay, prefilled with the recorded request.
type replayForm struct {
	Method, Path, Headers, Body string
	Action                      string
	Omitted                     []string
	BodyLost                    bool
}

func newReplayForm(e *inspect.Entry) replayForm {
	f := replayForm{Method: e.Method, Path: e.Path, Body: string(e.RequestBody), Action: entryURL(e) + "/replay"}
	var lines []string
	for _, hl := range headerLines(e.RequestHeader) {
		if hl.Redacted {
			f.Omitted = append(f.Omitted, hl.Name)
			continue
		}
		if skipReplayHeader(hl.Name) {
			continue
		}
		lines = append(lines, hl.Name+": "+hl.Value)
	}
	f.Headers = strings.Join(lines, "\n")
	f.BodyLost = e.BytesIn > 0 && (!e.Bodies || e.RequestBodyCut)
	return f
}

func (h *Handler) entry(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.lookup(r, s)
	if err != nil {
		return err
	}
	h.render(w, r, s, "entry", http.StatusOK, entryData{E: e, Target: target(e), ReqHeader: headerLines(e.RequestHeader),
		RespHeader: headerLines(e.ResponseHeader), Replay: newReplayForm(e)})
	return nil
}

// trafficJSON is the data call behind the list: the newest entries matching the query's filter.
func (h *Handler) trafficJSON(w http.ResponseWriter, r *http.Request, s *session) error {
	if h.cfg.Traffic == nil {
		return notFound("The traffic inspector is off on this server.")
	}
	before, _ := strconv.ParseUint(r.URL.Query().Get("before"), 10, 64)
	out := []summary{}
	for _, e := range h.cfg.Traffic.List(s.caller.AccountID, filterOf(r.URL.Query()), before, pageSize) {
		out = append(out, summarize(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"replica": h.cfg.Replica, "entries": out})
	return nil
}

// entryJSON is one entry in full, as recorded (secrets already redacted).
func (h *Handler) entryJSON(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.lookup(r, s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		*inspect.Entry
		Endpoint   string  `json:"endpoint,omitempty"`
		DurationMS float64 `json:"duration_ms"`
	}{e, e.EndpointURL(), e.DurationMS()})
	return nil
}

// setBodies turns keeping bodies on or off for the signed-in account.
func (h *Handler) setBodies(w http.ResponseWriter, r *http.Request, s *session) error {
	if h.cfg.Traffic == nil {
		return notFound("The traffic inspector is off on this server.")
	}
	on := r.PostForm.Get("on") == "true"
	h.cfg.Traffic.SetBodies(s.caller.AccountID, on)
	done := "bodies-off"
	if on {
		done = "bodies-on"
	}
	http.Redirect(w, r, Prefix+"traffic?done="+done, http.StatusSeeOther)
	return nil
}

// Bounds of a live view: it ends after streamMax (the browser reconnects on its own), and says
// something at least every streamPing so proxies keep it open.
const (
	streamMax  = 10 * time.Minute
	streamPing = 15 * time.Second
	streamSend = 10 * time.Second
)

// stream is the live view: server-sent events of the account's new entries matching the
// query's filter, until the browser leaves, streamMax passes, or the key stops signing in.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, s *session) error {
	if h.cfg.Traffic == nil {
		return notFound("The traffic inspector is off on this server.")
	}
	sub, err := h.cfg.Traffic.Subscribe(s.caller.AccountID)
	if errors.Is(err, inspect.ErrTooManySubscribers) {
		return &userError{http.StatusTooManyRequests, "Too many live views of this account's traffic are open; close one."}
	} else if err != nil {
		return err
	}
	defer sub.Close()
	f := filterOf(r.URL.Query())
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // the server's read timeout would end the stream
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event, data string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamSend))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("ready", `{"replica":`+strconv.Quote(h.cfg.Replica)+`}`) {
		return nil
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	end := time.NewTimer(streamMax)
	defer end.Stop()
	lastCheck := time.Now()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-end.C:
			return nil
		case <-ping.C:
			if time.Since(lastCheck) >= sessionCheckInterval {
				if _, err := h.authenticate(r.Context(), s.token); err != nil && !isUnavailable(err) {
					h.sessions.remove(s.id)
					send("signedout", "{}")
					return nil
				}
				lastCheck = time.Now()
			}
			if !send("ping", "{}") {
				return nil
			}
		case e := <-sub.C:
			if sub.Lost() && !send("lost", "{}") {
				return nil
			}
			if !f.Match(e) {
				continue
			}
			b, _ := json.Marshal(summarize(e))
			if !send("entry", string(b)) {
				return nil
			}
		}
	}
}
