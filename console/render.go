package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// view is what every page's template receives.
type view struct {
	Title   string
	Nav     string // the navigation entry of the page
	Signed  bool
	Account string
	KeyID   string
	CSRF    string
	Replica string
	Notice  string
	Data    any
}

// pageTitles names every page template and the navigation entry it belongs to.
var pageTitles = map[string][2]string{
	"signin":   {"Sign in", ""},
	"overview": {"Overview", "overview"},
	"agents":   {"Agents", "agents"},
	"edges":    {"Edges", "edges"},
	"domains":  {"Domains and addresses", "domains"},
	"traffic":  {"Traffic", "traffic"},
	"entry":    {"Traffic entry", "traffic"},
	"replay":   {"Replay", "traffic"},
	"error":    {"Error", ""},
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"ms": func(d time.Duration) string {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	},
	"bytes": humanBytes,
	"text":  bodyText,
	"lower": strings.ToLower,
	// hostOf is the host of a URL, for a filter by host.
	"hostOf": func(u string) string {
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			return p.Hostname()
		}
		return u
	},
	// modules is the argument of the modules table: the page's CSRF token and the modules.
	"modules": func(csrf string, m []moduleRow) any {
		return struct {
			CSRF    string
			Modules []moduleRow
		}{csrf, m}
	},
	// body is the argument of the body partial: the kept bytes, whether they were cut, whether
	// the account kept bodies then, and the body's size.
	"body": func(b []byte, cut, kept bool, size int64) any {
		return struct {
			Bytes     []byte
			Cut, Kept bool
			Size      int64
		}{b, cut, kept, size}
	},
	"statusClass": func(status int) string {
		switch {
		case status >= 500:
			return "s5"
		case status >= 400:
			return "s4"
		case status >= 300:
			return "s3"
		case status >= 200:
			return "s2"
		}
		return "s0"
	},
}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := fs.ReadFile(assets, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	partials, err := fs.ReadFile(assets, "templates/partials.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for name := range pageTitles {
		body, err := fs.ReadFile(assets, path.Join("templates", name+".html"))
		if err != nil {
			return nil, err
		}
		t, err := template.New("layout").Funcs(funcs).Parse(string(layout))
		if err == nil {
			_, err = t.New("partials").Parse(string(partials))
		}
		if err != nil {
			return nil, fmt.Errorf("console layout: %w", err)
		}
		if _, err := t.New(name).Parse(string(body)); err != nil {
			return nil, fmt.Errorf("console page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// render writes a page: the layout around the page's own template, with data.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, s *session, name string, status int, data any) {
	v := view{Title: pageTitles[name][0], Nav: pageTitles[name][1], Replica: h.cfg.Replica, Data: data,
		Notice: notices[r.URL.Query().Get("done")]}
	if s != nil {
		v.Signed, v.Account, v.KeyID, v.CSRF = true, s.caller.AccountID, s.caller.KeyID, s.csrf
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.log.Error("console: rendering a page failed", "page", name, "err", err)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// notices are the messages a page shows after a form redirected to it (?done=...): fixed
// texts, so that no link can put words of its choosing on a page.
var notices = map[string]string{
	"stop":       "The agent was told to stop.",
	"restart":    "The agent was told to restart.",
	"module-on":  "The module was turned on.",
	"module-off": "The module was turned off.",
	"bodies-on":  "Bodies are now kept for this account's new traffic (the first 16 KiB of each).",
	"bodies-off": "Bodies are no longer kept for new traffic.",
}

// fail answers a page's error.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status, msg := errorStatus(err)
	if status == http.StatusInternalServerError {
		h.log.Error("console: request failed", "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		h.toSignin(w, r, err)
		return
	}
	h.renderError(w, r, s, status, msg)
}

func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	h.render(w, r, s, "error", status, struct {
		Status int
		Text   string
		Msg    string
	}{status, http.StatusText(status), msg})
}

// notFound answers a console path that does not exist.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.renderError(w, r, nil, http.StatusNotFound, "There is no console page at this address.")
}

// writeJSON answers a data call.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// bodyText shows a kept body: as text when it is UTF-8 text, else as a note of its size.
func bodyText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return fmt.Sprintf("(%s of binary data)", humanBytes(int64(len(b))))
	}
	return string(b)
}
