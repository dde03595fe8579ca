package enforce

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestUserAgentFilter walks each step of the documented decision. The order is ngrok's (allow
// overrides deny; docs/decisions.md): "allow overrides deny" is an allow carving an exception
// out of a deny, "deny matches" and "deny beside allow" a User-Agent matching only deny refused,
// "deny does not match" no allow rules and no deny match admitted, "allow does not match" and
// "neither, with an allow rule" allow rules of which none matches refused.
func TestUserAgentFilter(t *testing.T) {
	google := []string{`(?i)google-images`}
	broad := []string{`(?i)google`, `[Bb]ing`}
	cases := []struct {
		name        string
		allow, deny []string
		ua          []string // nil: no header
		want        bool
	}{
		{"no rules admit", nil, nil, []string{"anything"}, true},
		{"no rules admit a missing header", nil, nil, nil, true},
		{"deny matches", nil, broad, []string{"Googlebot/2.1"}, false},
		{"deny does not match", nil, broad, []string{"curl/8.5"}, true},
		{"allow matches", []string{`^curl/`}, nil, []string{"curl/8.5"}, true},
		{"allow does not match", []string{`^curl/`}, nil, []string{"Mozilla/5.0"}, false},
		{"allow overrides deny", google, broad, []string{"Google-Images/1.0"}, true},
		{"deny beside allow", google, broad, []string{"Googlebot/2.1"}, false},
		{"a broad allow overrides a narrower deny", []string{`(?i)google`}, []string{`(?i)googlebot`}, []string{"Googlebot/2.1"}, true},
		{"neither, with an allow rule", google, broad, []string{"curl/8.5"}, false},
		{"no header refused", nil, broad, nil, false},
		{"empty header refused", nil, broad, []string{""}, false},
		{"no header admitted by ^$", []string{`^$`}, broad, nil, true},
		{"only the first header counts", nil, []string{`^bad`}, []string{"good", "bad"}, true},
		{"the first header refused", nil, []string{`^bad`}, []string{"bad", "good"}, false},
		{"unanchored match", nil, []string{`bot`}, []string{"my-crawler-bot/1"}, false},
	}
	for _, c := range cases {
		f, err := NewUserAgentFilter(c.allow, c.deny)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := f.Admits(c.ua); got != c.want {
			t.Errorf("%s: %q admitted = %v, want %v", c.name, c.ua, got, c.want)
		}
	}
}

// TestUserAgentFilterStage: a refused request gets 403 ERR_NGROK_3211 and never reaches the
// upstream; an admitted one does; a rule that does not compile refuses the stage, naming it.
func TestUserAgentFilterStage(t *testing.T) {
	f, err := NewUserAgentFilter(nil, []string{`(?i)bot`})
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != "user_agent_filter" {
		t.Errorf("name %q", f.Name())
	}
	reached := 0
	h := f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	for ua, want := range map[string]int{"Googlebot/2.1": 403, "curl/8.5": 200} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("User-Agent", ua)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", ua, rec.Code, want)
		}
		if want == 403 && (rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3211" || !strings.Contains(rec.Body.String(), "ERR_NGROK_3211")) {
			t.Errorf("%s: refusal %q %q", ua, rec.Header().Get("ngrok-error-code"), rec.Body)
		}
	}
	if reached != 1 {
		t.Errorf("the upstream was reached %d times, want once", reached)
	}
	for _, bad := range [][2][]string{{{`(`}, nil}, {nil, {`ok`, `[z-a]`}}} {
		_, err := NewUserAgentFilter(bad[0], bad[1])
		if err == nil {
			t.Errorf("%v accepted", bad)
			continue
		}
		if !strings.Contains(err.Error(), "allow[0]") && !strings.Contains(err.Error(), "deny[1]") {
			t.Errorf("the error does not name the rule: %v", err)
		}
	}
}
