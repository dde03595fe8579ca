package enforce

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/edgeplane/edgeplane/internal/outbound"
)

// jwtSkew is the clock skew allowed on exp, nbf and iat.
const jwtSkew = 30 * time.Second

// jwtMaxBody bounds how much of a body is read to find a token in it; a larger body is carried
// on untouched, and no token is taken from it.
const jwtMaxBody = 1 << 20

// JWTToken is one place a token may be: a header or a body field called Name, whose value
// starts with Prefix (removed before parsing). Type "at+jwt" also requires the token's typ
// header to say so (RFC 9068).
type JWTToken struct {
	Type, Method, Name, Prefix string
}

// JWTConfig is the jwt_validation module's configuration.
type JWTConfig struct {
	Issuers, Audiences []string
	Tokens             []JWTToken
	Algorithms         []string
	// JKUs are the https URLs of the key sets the signing keys come from.
	JKUs []string
	// Client fetches the key sets (it trusts the system roots plus --outbound-ca).
	Client *http.Client
	// BodyTimeout bounds reading a body searched for a token (0: BodyReadTimeout).
	BodyTimeout time.Duration
	// KeySets is the data plane's cache of key sets, shared by every stage given it; without
	// it the stage fetches and keeps its key sets itself.
	KeySets *KeySets
}

// JWT is the jwt_validation module: a request must carry, in one of the configured places, a
// JSON Web Token signed with an allowed algorithm by a key of one of the key sets, issued by an
// allowed issuer, for an allowed audience (when any is configured), with an exp and within its
// exp and nbf (30 s of skew). A request without a token gets 401 ERR_NGROK_3406; one with a
// token that fails any check gets 401 ERR_NGROK_3401; both carry a Bearer WWW-Authenticate
// challenge (RFC 6750) saying what was wrong. An admitted request goes on unchanged.
type JWT struct {
	cfg  JWTConfig
	algs []jose.SignatureAlgorithm
	sets []*jwksCache
}

// NewJWT builds the stage. It refuses a configuration that could admit no one or anyone: no
// token location, no issuer, no key set, a key set URL that is not https, or no algorithm that
// a published key set can serve (HMAC algorithms need a shared secret, which a JWKS must never
// hold, so they are ignored).
func NewJWT(cfg JWTConfig) (*JWT, error) {
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("at least one token location (http.tokens) is needed")
	}
	if len(cfg.Issuers) == 0 {
		return nil, errors.New("at least one issuer is needed in issuer.allow_list")
	}
	if len(cfg.JKUs) == 0 {
		return nil, errors.New("at least one key set URL is needed in jws.keys.sources.additional_jkus")
	}
	j := &JWT{cfg: cfg}
	for _, a := range cfg.Algorithms {
		if strings.HasPrefix(a, "HS") || strings.EqualFold(a, "none") {
			continue
		}
		j.algs = append(j.algs, jose.SignatureAlgorithm(a))
	}
	if len(j.algs) == 0 {
		return nil, errors.New("no allowed algorithm can be verified with a published key set (HMAC algorithms are not usable)")
	}
	for _, u := range cfg.JKUs {
		if pu, err := url.Parse(u); err != nil || pu.Scheme != "https" || pu.Host == "" {
			return nil, errors.New("the key set URL " + u + " is not an https URL")
		}
		j.sets = append(j.sets, cfg.KeySets.cache(u, cfg.Client))
	}
	for i, t := range j.cfg.Tokens {
		if t.Method == "" {
			j.cfg.Tokens[i].Method = "header"
		}
	}
	return j, nil
}

// Name is the module's name.
func (j *JWT) Name() string { return "jwt_validation" }

// Wrap admits requests with a valid token and refuses the others.
func (j *JWT) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if j.Admit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// Admit checks one request: it reports true when a token in it is valid, and otherwise answers
// the refusal (401 with its challenge) on w and reports false. A body a token was looked for in
// is put back whole. The traffic policy's jwt-validation action runs it in its phase.
func (j *JWT) Admit(w http.ResponseWriter, r *http.Request) bool {
	_, ok := j.admit(w, r, false)
	return ok
}

// checkedToken is a token Admit checked: where it was found, its JOSE header and, when its
// signature verified, its claims; err says why it was not accepted (nil: it admitted the request).
type checkedToken struct {
	loc            JWTToken
	header, claims map[string]any
	err            error
}

// admit is Admit, returning the tokens it checked in order (the admitting one last) when
// record is set, for the jwt-validation action's results.
func (j *JWT) admit(w http.ResponseWriter, r *http.Request, record bool) ([]checkedToken, bool) {
	tokens, late := j.find(w, r)
	if late {
		ErrorPage(w, r, http.StatusRequestTimeout, 3406, "The request body a token is looked for in did not arrive in time.")
		return nil, false
	}
	if len(tokens) == 0 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="edgeplane"`)
		ErrorPage(w, r, http.StatusUnauthorized, 3406, "Token could not be found in request.")
		return nil, false
	}
	var reason error
	var checked []checkedToken
	for _, t := range tokens {
		var header, claims map[string]any
		if record {
			header, claims = map[string]any{}, map[string]any{}
		}
		reason = j.check(r, t, header, claims)
		if record {
			if reason != nil {
				clear(claims) // claims whose signature did not verify are nobody's word
			}
			checked = append(checked, checkedToken{loc: t.loc, header: header, claims: claims, err: reason})
		}
		if reason == nil {
			return checked, true
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="edgeplane", error="invalid_token", error_description="`+
		strings.NewReplacer(`"`, "'", `\`, "/").Replace(reason.Error())+`"`)
	ErrorPage(w, r, http.StatusUnauthorized, 3401, "Your request lacks valid credentials: the token is not valid ("+reason.Error()+").")
	return checked, false
}

// foundToken is a token with the location it was found in.
type foundToken struct {
	raw string
	loc JWTToken
}

// find returns the tokens of the request's configured locations, in their order, and whether a
// body it had to read did not arrive within the body's time bound.
func (j *JWT) find(w http.ResponseWriter, r *http.Request) (out []foundToken, late bool) {
	var body []byte
	bodyRead := false
	for _, loc := range j.cfg.Tokens {
		var v string
		switch loc.Method {
		case "header":
			v = r.Header.Get(loc.Name)
		case "body":
			if !bodyRead {
				body, late = readBodyForToken(w, r, j.cfg.BodyTimeout)
				if late {
					return nil, true
				}
				bodyRead = true
			}
			v = bodyField(body, r.Header.Get("Content-Type"), loc.Name)
		}
		if loc.Prefix != "" {
			if len(v) < len(loc.Prefix) || !strings.EqualFold(v[:len(loc.Prefix)], loc.Prefix) {
				continue
			}
			v = v[len(loc.Prefix):]
		}
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, foundToken{raw: v, loc: loc})
		}
	}
	return out, false
}

// readBodyForToken reads up to jwtMaxBody of the body, within its time bound (within, 0:
// BodyReadTimeout), and puts what it read back in front of the rest, so the upstream gets the
// body unchanged. It returns nil when the body is larger, and reports late when the client did
// not send it in time: a client trickling its body must not hold the handler for ever.
func readBodyForToken(w http.ResponseWriter, r *http.Request, within time.Duration) (b []byte, late bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false
	}
	body := boundBodyTime(w, r, within)
	b, err := io.ReadAll(io.LimitReader(body, jwtMaxBody+1))
	if timedOut(err) {
		return nil, true
	}
	body.lift()
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || len(b) > jwtMaxBody {
		return nil, false
	}
	return b, false
}

// bodyField returns the string field name of a form or JSON object body.
func bodyField(body []byte, contentType, name string) string {
	if len(body) == 0 {
		return ""
	}
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return ""
		}
		return vals.Get(name)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(obj[name], &s) != nil {
		return ""
	}
	return s
}

// check verifies one token: its algorithm, type, signature, times, issuer and audience. A
// non-nil header and claims are filled with the token's JOSE header and, once the signature
// verified, all its claims (JSON numbers that are whole as int64).
func (j *JWT) check(r *http.Request, t foundToken, header, claimsOut map[string]any) error {
	tok, err := jwt.ParseSigned(t.raw, j.algs)
	if err != nil {
		return errors.New("not a signed JWT with an allowed algorithm")
	}
	if len(tok.Headers) != 1 {
		return errors.New("not a single-signature JWT")
	}
	h := tok.Headers[0]
	if header != nil {
		for k, v := range h.ExtraHeaders {
			header[string(k)] = jsonValue(v)
		}
		header["alg"] = h.Algorithm
		if h.KeyID != "" {
			header["kid"] = h.KeyID
		}
	}
	if t.loc.Type == "at+jwt" {
		typ, _ := h.ExtraHeaders[jose.HeaderType].(string)
		if !strings.EqualFold(typ, "at+jwt") && !strings.EqualFold(typ, "application/at+jwt") {
			return errors.New("not an access token (typ at+jwt)")
		}
	}
	var claims jwt.Claims
	var all map[string]any
	dests := []any{&claims}
	if claimsOut != nil {
		dests = append(dests, &all)
	}
	verified := false
	var fetchErr error
	for _, set := range j.sets {
		keys, err := set.candidates(r.Context(), h.KeyID, h.Algorithm)
		if err != nil {
			fetchErr = err
			continue
		}
		for _, k := range keys {
			if tok.Claims(k, dests...) == nil {
				for c, v := range all {
					claimsOut[c] = jsonValue(v)
				}
				verified = true
				break
			}
		}
		if verified {
			break
		}
	}
	switch {
	case !verified && fetchErr != nil:
		if r, ok := outbound.Refused(fetchErr); ok {
			return errors.New("the signing keys could not be fetched: " + r.Reason() + " (--outbound-allow-private)")
		}
		return errors.New("the signing keys could not be fetched")
	case !verified:
		return errors.New("the signature does not verify with any key of the key sets")
	case claims.Expiry == nil:
		return errors.New("the token has no exp")
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Time: time.Now()}, jwtSkew); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return errors.New("the token has expired")
		case errors.Is(err, jwt.ErrNotValidYet):
			return errors.New("the token is not valid yet")
		default:
			return errors.New("the token was issued in the future")
		}
	}
	if !slices.Contains(j.cfg.Issuers, claims.Issuer) {
		return errors.New("the issuer is not allowed")
	}
	if len(j.cfg.Audiences) > 0 && !slices.ContainsFunc(claims.Audience, func(a string) bool { return slices.Contains(j.cfg.Audiences, a) }) {
		return errors.New("the audience is not allowed")
	}
	return nil
}
