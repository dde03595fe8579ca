package enforce

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// jwtStageWith is a jwt_validation stage of the key set at url, fetched with client, whose key
// sets are cached in ks.
func jwtStageWith(t *testing.T, url string, client *http.Client, ks *KeySets) *JWT {
	t.Helper()
	j, err := NewJWT(JWTConfig{Issuers: []string{"https://idp.example.com/"}, Audiences: []string{"api://edge"},
		Tokens: []JWTToken{{Type: "jwt", Method: "header", Name: "Authorization", Prefix: "Bearer "}}, Algorithms: []string{"RS256", "ES256"},
		JKUs: []string{url}, Client: client, KeySets: ks})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestKeySetsShared: the stages of one data plane (one KeySets) naming the same key set with the
// same client share its keys (one fetch for two accounts' routes, and for a rebuilt stage),
// while another data plane's KeySets and a stage without one fetch for themselves.
func TestKeySetsShared(t *testing.T) {
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	tok := "Bearer " + sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))
	ks := NewKeySets()
	a := jwtStageWith(t, srv.URL+"/keys", srv.Client(), ks)
	b := jwtStageWith(t, srv.URL+"/keys", srv.Client(), ks)
	for name, j := range map[string]*JWT{"A": a, "B": b, "A rebuilt": jwtStageWith(t, srv.URL+"/keys", srv.Client(), ks)} {
		if rec := bearer(j.Wrap(okHandler()), tok); rec.Code != 200 {
			t.Fatalf("%s's route: %d", name, rec.Code)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Errorf("%d fetches for the routes of one data plane, want 1", n)
	}
	if n := ks.len(); n != 1 {
		t.Errorf("%d key sets held, want 1", n)
	}
	other := jwtStageWith(t, srv.URL+"/keys", srv.Client(), NewKeySets())
	own := jwtStageWith(t, srv.URL+"/keys", srv.Client(), nil)
	for _, j := range []*JWT{other, own} {
		if rec := bearer(j.Wrap(okHandler()), tok); rec.Code != 200 {
			t.Fatalf("another data plane's route: %d", rec.Code)
		}
	}
	if n := srv.fetches.Load(); n != 3 {
		t.Errorf("%d fetches, want 3 (one per data plane, one for the stage of its own)", n)
	}
}

// TestKeySetsNoPoisoning: two accounts naming the same key set URL. A stage whose client does
// not trust the key set's server is not given the keys another stage fetched with a client that
// does (it fetches with its own, and refuses); and one account's tokens with made-up kids do
// not make the other's valid tokens refused, nor the set be fetched more than once per
// jwksMinRefresh.
func TestKeySetsNoPoisoning(t *testing.T) {
	clock := newFakeClock()
	jwksNow = clock.now
	defer func() { jwksNow = time.Now }()
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	tok := "Bearer " + sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))
	ks := NewKeySets()
	a := jwtStageWith(t, srv.URL+"/keys", srv.Client(), ks).Wrap(okHandler())
	if rec := bearer(a, tok); rec.Code != 200 {
		t.Fatalf("A's route: %d", rec.Code)
	}
	// B's client trusts the system roots only, not the test server's certificate.
	untrusting := &http.Client{Timeout: 5 * time.Second}
	b := jwtStageWith(t, srv.URL+"/keys", untrusting, ks).Wrap(okHandler())
	rec := bearer(b, tok)
	if rec.Code != 401 || rec.Header().Get("ngrok-error-code") != "ERR_NGROK_3401" || !strings.Contains(rec.Header().Get("WWW-Authenticate"), "could not be fetched") {
		t.Errorf("B's route, whose client cannot fetch the key set A's fetched: %d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}

	c := jwtStageWith(t, srv.URL+"/keys", srv.Client(), ks).Wrap(okHandler())
	fetches := srv.fetches.Load()
	other := newTestKeys(t).rsa
	for i := range 20 {
		made := sign(t, jose.RS256, other, "made-up-"+string(rune('a'+i)), "JWT", claimsAt(nil))
		if rec := bearer(a, "Bearer "+made); rec.Code != 401 {
			t.Fatalf("A's token with a made-up kid: %d", rec.Code)
		}
		if rec := bearer(c, tok); rec.Code != 200 {
			t.Fatalf("C's valid token after A's made-up kids: %d", rec.Code)
		}
	}
	if n := srv.fetches.Load() - fetches; n > 1 {
		t.Errorf("%d fetches for 20 made-up kids within the refresh interval, want at most 1", n)
	}
}

// TestKeySetsDropped: a key set no stage holds any longer is dropped from the data plane's
// cache, so the cache holds no more than the live plans name; a stage built after fetches it
// again.
func TestKeySetsDropped(t *testing.T) {
	k := newTestKeys(t)
	srv := newJWKSServer(t, k.public()...)
	tok := "Bearer " + sign(t, jose.RS256, k.rsa, "rsa1", "JWT", claimsAt(nil))
	ks := NewKeySets()
	for i := range 3 {
		url := srv.URL + "/keys/" + string(rune('a'+i))
		if rec := bearer(jwtStageWith(t, url, srv.Client(), ks).Wrap(okHandler()), tok); rec.Code != 200 {
			t.Fatalf("route %d: %d", i, rec.Code)
		}
	}
	kept := jwtStageWith(t, srv.URL+"/keys/kept", srv.Client(), ks)
	if n := collectedDownTo(ks.len, 1); n != 1 {
		t.Fatalf("%d key sets held with one stage left, want 1", n)
	}
	runtime.KeepAlive(kept)
	fetches := srv.fetches.Load()
	if rec := bearer(jwtStageWith(t, srv.URL+"/keys/a", srv.Client(), ks).Wrap(okHandler()), tok); rec.Code != 200 {
		t.Fatalf("a route built again: %d", rec.Code)
	}
	if n := srv.fetches.Load() - fetches; n != 1 {
		t.Errorf("%d fetches for a dropped key set's new stage, want 1", n)
	}
}

// collectedDownTo runs the garbage collector until held() is want or 10 s have passed, and
// returns held(): the weak caches' entries go once their cleanups, which run on their own
// goroutine, have.
func collectedDownTo(held func() int, want int) int {
	deadline := time.Now().Add(10 * time.Second)
	for held() > want && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	return held()
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
}
