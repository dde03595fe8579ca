package enforce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/edgeplane/edgeplane/internal/outbound"
)

// Limits of the JWKS cache.
const (
	// jwksMaxAge is how long a fetched key set is used before it is fetched again.
	jwksMaxAge = time.Hour
	// jwksMaxBody bounds a key set document.
	jwksMaxBody = 1 << 20
)

// jwksMinRefresh is the least time between two fetches of one key set: a token naming an
// unknown kid fetches the set again, but no more often than this, so a client sending made-up
// kids cannot make edgeplane hammer the identity provider. A variable for the tests.
var jwksMinRefresh = 10 * time.Second

// jwksNow is the cache's clock, a variable for the tests.
var jwksNow = time.Now

// KeySets holds the key sets of a data plane's jwt_validation modules and jwt-validation
// actions, one per URL and outbound client, so that the keys survive the rebuilds of a plan and
// routes and binds sharing an identity provider share its keys and its refresh limit. It is the
// data plane's instance (plan.Env), not process-wide state: two data planes in one process keep
// theirs apart. A key set is kept while a stage holds it and dropped once no stage does (its
// entry is removed when the garbage collector finds it unreferenced), so the cache holds no more
// URLs than the live plans name, however many an account's configurations have named over time.
//
// Sharing across accounts cannot carry one account's keys into another's checks: the keys of an
// entry come only from its URL's own answer, fetched with its own client, and an account's
// configuration gives a key set nothing but that URL (a stage given another client gets an
// entry of its own). An account sending tokens with made-up kids makes the set be fetched
// again at most once per jwksMinRefresh, which fetches the same document any other account's
// refresh would. The zero value is not ready: use NewKeySets.
type KeySets struct {
	sets *weakCache[keySetKey, jwksCache]
}

type keySetKey struct {
	url    string
	client *http.Client
}

// NewKeySets returns an empty set of key set caches.
func NewKeySets() *KeySets {
	return &KeySets{sets: newWeakCache[keySetKey, jwksCache]()}
}

// cache returns the cache of a key set URL fetched with client, made on first use. With a nil
// KeySets the cache is the caller's own.
func (ks *KeySets) cache(rawURL string, client *http.Client) *jwksCache {
	mk := func() *jwksCache { return &jwksCache{url: rawURL, client: client} }
	if ks == nil {
		return mk()
	}
	return ks.sets.get(keySetKey{rawURL, client}, mk)
}

// len is the number of key sets held, for the tests.
func (ks *KeySets) len() int { return ks.sets.len() }

// jwksCache is the fetched key set of one URL.
type jwksCache struct {
	url    string
	client *http.Client

	fetchMu sync.Mutex // one fetch at a time

	mu      sync.Mutex
	keys    []jose.JSONWebKey // public signing keys only
	fetched time.Time         // of keys
	lastTry time.Time
	lastErr error
}

// candidates returns the keys that may have signed a token with kid and alg: the key with that
// kid, or every key when the token names none; keys declaring another algorithm are left out.
// The set is fetched when it never was or is older than jwksMaxAge, and again when no key has
// the token's kid (the provider may have rotated its keys), within jwksMinRefresh.
func (c *jwksCache) candidates(ctx context.Context, kid, alg string) ([]jose.JSONWebKey, error) {
	c.mu.Lock()
	keys, fetched := c.keys, c.fetched
	c.mu.Unlock()
	var err error
	if fetched.IsZero() || jwksNow().Sub(fetched) > jwksMaxAge {
		keys, fetched, err = c.refresh(ctx, fetched)
	}
	out := matchKeys(keys, kid, alg)
	if len(out) == 0 && kid != "" && err == nil {
		keys, _, err = c.refresh(ctx, fetched)
		out = matchKeys(keys, kid, alg)
	}
	if len(out) == 0 && err != nil {
		return nil, err
	}
	return out, nil
}

func matchKeys(keys []jose.JSONWebKey, kid, alg string) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == alg) {
			out = append(out, k)
		}
	}
	return out
}

// refresh fetches the set again unless another caller did since seen (then its keys are used),
// or the last attempt was less than jwksMinRefresh ago (then the keys held are used, with the
// last error when there are none).
func (c *jwksCache) refresh(ctx context.Context, seen time.Time) ([]jose.JSONWebKey, time.Time, error) {
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	c.mu.Lock()
	if c.fetched.After(seen) || jwksNow().Sub(c.lastTry) < jwksMinRefresh {
		keys, fetched, err := c.keys, c.fetched, c.lastErr
		c.mu.Unlock()
		if keys != nil {
			err = nil
		}
		return keys, fetched, err
	}
	c.lastTry = jwksNow()
	c.mu.Unlock()

	keys, err := fetchJWKS(ctx, c.client, c.url)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	if err != nil {
		return c.keys, c.fetched, err
	}
	c.keys, c.fetched = keys, jwksNow()
	return c.keys, c.fetched, nil
}

// fetchJWKS fetches a JSON Web Key Set over https and keeps its public signing keys: symmetric
// keys (which a published set must never hold: anyone could sign with them) and keys meant for
// encryption are dropped, and a private key counts as its public half.
func fetchJWKS(ctx context.Context, client *http.Client, rawURL string) ([]jose.JSONWebKey, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("the key set URL %s is not an https URL", rawURL)
	}
	if client == nil {
		client = outbound.NewClient(outbound.Options{})
	}
	client = httpsOnlyRedirects(client)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the key set %s: %w", rawURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the key set %s: %s", rawURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the key set %s: %w", rawURL, err)
	}
	if len(body) > jwksMaxBody {
		return nil, fmt.Errorf("the key set %s is larger than 1 MiB", rawURL)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("the key set %s is not a JWKS: %w", rawURL, err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			continue // a key of a type go-jose does not know; the others still count
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub := k.Public()
		if pub.Key == nil {
			continue
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, errors.New("the key set " + rawURL + " holds no public signing key")
	}
	return keys, nil
}

// httpsOnlyRedirects returns a copy of client that follows a redirect only to an https URL (and
// otherwise applies client's own redirect policy): a key set or an identity provider's answer
// must never come from an http URL it redirected to, where anyone on the path could forge it.
func httpsOnlyRedirects(client *http.Client) *http.Client {
	c := *client
	prev := client.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return fmt.Errorf("refused a redirect to %s: not an https URL", req.URL.Redacted())
		}
		if prev != nil {
			return prev(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}
