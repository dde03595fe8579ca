package enforce

// The saml module: a SAML 2.0 service provider in front of a route. crewjam/saml does the XML
// signature work (signing authentication requests, verifying responses and assertions); this
// file is the glue: which URLs the route serves, the sign-in's state, what an assertion must
// say, and the session it leads to (identity.go).

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"
)

// Error codes of the saml module (ngrok's): a RelayState that names no sign-in this route
// started (an expired one, or an IdP-initiated sign-in on a route that does not allow them), and
// a signed-in user who is in none of authorized_groups.
const (
	CodeSAMLRelayState = 5300
	CodeSAMLNotInGroup = 5312
)

// maxACSBody bounds the form an identity provider posts to the assertion consumer service: a
// signed response with a few hundred attributes is far below it.
const maxACSBody = 512 << 10

// SAMLConfig is one route's saml module as its stage needs it.
type SAMLConfig struct {
	// IdPMetadata is the identity provider's EntityDescriptor (XML).
	IdPMetadata string
	// EntityID, MetadataURL, ACSURL and SLOURL are the service provider's URLs as the API gave
	// them to the user for the IdP's configuration; the stage serves their paths.
	EntityID, MetadataURL, ACSURL, SLOURL string
	// Key and Certificate sign the authentication requests (the route's kept pair).
	Key         *rsa.PrivateKey
	Certificate *x509.Certificate
	// ForceAuthn asks the IdP to prompt for credentials even when it has a session.
	ForceAuthn bool
	// AllowIdPInitiated accepts responses to no request of this route (the IdP's own links).
	AllowIdPInitiated bool
	// AuthorizedGroups, when not empty, admits only members of one of them (see samlGroups).
	AuthorizedGroups []string
	// NameIDFormat is asked for in the requests' NameIDPolicy.
	NameIDFormat string
	// Session is the session half; its Scope is set here.
	Session SessionConfig
	// RouteID is the route's id: the assertion ids this route accepted are kept under the scope
	// "saml:"+RouteID, so a route never refuses an assertion because another route took it.
	RouteID string
	// UseOnce records an accepted assertion's id until expires and reports whether it was fresh,
	// on every replica (the store's UseOnce): the sealed sign-in cookie is stateless, so without
	// it a captured answer could sign in again while its conditions hold. nil, or an error, makes
	// the ACS refuse every answer (503): an assertion is never accepted unrecorded.
	UseOnce func(ctx context.Context, scope, id string, expires time.Time) (bool, error)
	// Revocations are the sessions ended by single logout, shared by every route of the
	// process and read from the store: a session the IdP ended stops opening on every replica.
	// nil: the IdP's LogoutRequests are refused (503), as no session could be ended.
	Revocations *Revocations
	// BodyTimeout bounds reading the form an IdP's answer or logout message is posted in
	// (0: BodyReadTimeout).
	BodyTimeout time.Duration
	// Client resolves artifacts at the IdP and sends it back-channel LogoutRequests (the data
	// plane's guarded outbound client; nil: one that trusts the system's roots and reaches
	// public addresses only).
	Client *http.Client
	// Log receives warnings an operator may want, such as an IdP refusing a back-channel
	// logout; nil discards them.
	Log *slog.Logger
}

// SAML is the stage of the saml module.
type SAML struct {
	sp       *saml.ServiceProvider
	sessions *Sessions
	// binding is how requests go to the IdP: HTTP-POST when its metadata offers it, else
	// HTTP-Redirect; sso is its location.
	binding, sso string
	// The paths of the service provider's URLs, and their directory (/ngrok/saml/<route id>/).
	metadataPath, acsPath, sloPath, spDir string
	acsURL                                url.URL
	allowIdP, nameIDIsEmail               bool
	groups                                []string // authorized_groups, sorted
	metadata                              []byte   // the SP metadata served
	returnBase                            string   // the route's root, where a sign-in without a target ends
	// useOnce and onceScope keep each accepted assertion id used (SAMLConfig.UseOnce).
	useOnce   func(ctx context.Context, scope, id string, expires time.Time) (bool, error)
	onceScope string
	// Single logout: the IdP's service (slo, with sloBinding; "" when its metadata has none for
	// the browser, and soapSLO then says whether it has one with the SOAP binding),
	// the sessions ended (SAMLConfig.Revocations) under revScope, and the sessions' maximum
	// duration, which bounds how long a revocation is kept.
	slo, sloBinding string
	soapSLO         bool
	revocations     *Revocations
	revScope        string
	maxDuration     time.Duration
	// bodyTimeout bounds reading a posted form (SAMLConfig.BodyTimeout).
	bodyTimeout time.Duration
	// log and routeID: the warnings' destination and the route they name.
	log     *slog.Logger
	routeID string
}

// NewSAML builds the stage: the IdP's metadata parsed (it must offer a single sign-on service
// and a signing certificate, else no sign-in could ever succeed and the route fails closed),
// and the service provider with the route's key.
func NewSAML(c SAMLConfig) (*SAML, error) {
	if c.Key == nil || c.Certificate == nil {
		return nil, errors.New("no request signing key")
	}
	if c.RouteID == "" {
		return nil, errors.New("no route id to keep used assertions under")
	}
	var md saml.EntityDescriptor
	if err := xml.Unmarshal([]byte(c.IdPMetadata), &md); err != nil {
		return nil, fmt.Errorf("idp_metadata: %v", err)
	}
	if len(md.IDPSSODescriptors) == 0 {
		return nil, errors.New("idp_metadata has no IDPSSODescriptor")
	}
	if !hasSigningCert(md.IDPSSODescriptors) {
		return nil, errors.New("idp_metadata has no signing certificate to verify responses with")
	}
	urls := map[string]*url.URL{}
	for name, raw := range map[string]string{"entity_id": c.EntityID, "metadata_url": c.MetadataURL,
		"assertion_consumer_service_url": c.ACSURL, "single_logout_url": c.SLOURL} {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("%s %q is not an https URL", name, raw)
		}
		urls[name] = u
	}
	force := c.ForceAuthn
	sp := &saml.ServiceProvider{
		EntityID:          c.EntityID,
		Key:               c.Key,
		Certificate:       c.Certificate,
		MetadataURL:       *urls["metadata_url"],
		AcsURL:            *urls["assertion_consumer_service_url"],
		SloURL:            *urls["single_logout_url"],
		IDPMetadata:       &md,
		AuthnNameIDFormat: saml.NameIDFormat(c.NameIDFormat),
		SignatureMethod:   dsig.RSASHA256SignatureMethod,
		LogoutBindings:    []string{saml.HTTPPostBinding, saml.HTTPRedirectBinding, saml.SOAPBinding},
		// An unsolicited response (no InResponseTo) is admitted only on a route that allows
		// IdP-initiated sign-in; any other must answer the request of this browser's sign-in.
		AllowIDPInitiated: c.AllowIdPInitiated,
		// Artifacts are resolved over the guarded client, bounded in size, and only those
		// whose SourceID is this IdP's are sent anywhere.
		HTTPClient:               boundedClient(c.Client),
		RequireStandardArtifacts: true,
	}
	if force {
		sp.ForceAuthn = &force
	}
	s := &SAML{sp: sp, allowIdP: c.AllowIdPInitiated,
		metadataPath: urls["metadata_url"].Path, acsPath: urls["assertion_consumer_service_url"].Path,
		sloPath: urls["single_logout_url"].Path, spDir: path.Dir(urls["metadata_url"].Path) + "/", acsURL: sp.AcsURL,
		nameIDIsEmail: c.NameIDFormat == string(saml.EmailAddressNameIDFormat),
		useOnce:       c.UseOnce, onceScope: "saml:" + c.RouteID,
		revocations: c.Revocations, revScope: "saml-logout:" + c.RouteID, maxDuration: c.Session.MaximumDuration,
		bodyTimeout: c.BodyTimeout, log: c.Log, routeID: c.RouteID}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.binding, s.sso = saml.HTTPPostBinding, sp.GetSSOBindingLocation(saml.HTTPPostBinding)
	if s.sso == "" {
		s.binding, s.sso = saml.HTTPRedirectBinding, sp.GetSSOBindingLocation(saml.HTTPRedirectBinding)
	}
	if s.sso == "" {
		return nil, errors.New("idp_metadata has no SingleSignOnService with the HTTP-POST or HTTP-Redirect binding")
	}
	s.sloBinding, s.slo = saml.HTTPPostBinding, sp.GetSLOBindingLocation(saml.HTTPPostBinding)
	if s.slo == "" {
		s.sloBinding, s.slo = saml.HTTPRedirectBinding, sp.GetSLOBindingLocation(saml.HTTPRedirectBinding)
	}
	s.soapSLO = s.slo == "" && sp.GetSLOBindingLocation(saml.SOAPBinding) != ""
	s.groups = slices.Clone(c.AuthorizedGroups)
	sort.Strings(s.groups)
	// Sessions are bound to this service provider, this IdP and these groups: a change of any
	// of them asks everyone to sign in again, so a session never carries groups filtered for
	// another configuration.
	cfg := c.Session
	cfg.Scope = "saml|" + c.EntityID + "|" + md.EntityID + "|" + strings.Join(s.groups, "\n")
	sess, err := NewSessions(cfg)
	if err != nil {
		return nil, err
	}
	s.sessions = sess
	s.returnBase = strings.TrimSuffix(cfg.Base, "/") + "/"
	// The metadata lists the ACS with the HTTP-POST and HTTP-Artifact bindings, and the SLO
	// with HTTP-POST, HTTP-Redirect and SOAP (back-channel logout).
	meta := sp.Metadata()
	if s.metadata, err = xml.MarshalIndent(meta, "", "  "); err != nil {
		return nil, err
	}
	return s, nil
}

// hasSigningCert reports whether the IdP's metadata has a certificate for signing (a key
// descriptor for "signing" or for any use).
func hasSigningCert(ds []saml.IDPSSODescriptor) bool {
	for _, d := range ds {
		for _, k := range d.KeyDescriptors {
			if (k.Use == "" || k.Use == "signing") && len(k.KeyInfo.X509Data.X509Certificates) > 0 {
				return true
			}
		}
	}
	return false
}

// Name is the module's name.
func (s *SAML) Name() string { return "saml" }

// Wrap serves the service provider's own paths (metadata, assertion consumer service, single
// logout and the sign-in modules' logout path), and in front of everything else admits only a
// request with a session, sending others to the IdP.
func (s *SAML) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		StripIdentityHeaders(r.Header)
		switch r.URL.Path {
		case s.metadataPath:
			s.serveMetadata(w, r)
			return
		case s.acsPath:
			s.serveACS(w, r)
			return
		case s.sloPath:
			s.serveSLO(w, r)
			return
		case s.sessions.Paths.Logout:
			s.startLogout(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, s.spDir) {
			// Another path of the service provider's own: none, whatever the route's match.
			ErrorPage(w, r, http.StatusNotFound, 3200, "The SAML service provider of this route serves only its metadata, ACS and SLO URLs.")
			return
		}
		if s.sessions.Passthrough(r) {
			next.ServeHTTP(w, r)
			return
		}
		sess := s.sessions.Load(r)
		if sess == nil {
			s.startSignIn(w, r)
			return
		}
		if revoked, answered := s.checkRevoked(w, r, sess); answered {
			return
		} else if revoked {
			s.sessions.Clear(w)
			s.startSignIn(w, r)
			return
		}
		if !s.allowed(sess.Groups) {
			notInGroup(w, r)
			return
		}
		s.sessions.Touch(w, sess)
		SetIdentityHeaders(r.Header, sess.Identity)
		next.ServeHTTP(w, r)
	})
}

// serveMetadata answers the service provider's metadata: its entity id, the assertion consumer
// service, the single logout service and the request signing certificate.
func (s *SAML) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		ErrorPage(w, r, http.StatusMethodNotAllowed, CodeSignInFailed, "The SAML metadata is read with GET.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/samlmetadata+xml")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write([]byte(xml.Header))
		_, _ = w.Write(s.metadata)
	}
}

// samlFlow is a sign-in in progress: the id of the request sent to the IdP and where to go
// back to. It is kept in a sealed cookie named after the RelayState.
type samlFlow struct {
	ID     string `json:"i"`
	Return string `json:"r"`
	// Logout marks a logout's flow (its LogoutRequest's id), which only the IdP's
	// LogoutResponse may end, never an ACS answer.
	Logout bool `json:"l,omitempty"`
}

// startSignIn sends the browser to the IdP with a signed authentication request, remembering
// the request's id and the URL asked for under a fresh RelayState.
func (s *SAML) startSignIn(w http.ResponseWriter, r *http.Request) {
	req, err := s.sp.MakeAuthenticationRequest(s.sso, s.binding, saml.HTTPPostBinding)
	if err != nil {
		SignInFailed(w, r, http.StatusBadGateway, "The SAML authentication request could not be made.")
		return
	}
	state := RandomToken()
	if err := s.saveFlow(w, state, samlFlow{ID: req.ID, Return: s.sessions.ReturnTo(r)}); err != nil {
		SignInFailed(w, r, http.StatusBadRequest, "The sign-in could not be started.")
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if s.binding == saml.HTTPRedirectBinding {
		u, err := req.Redirect(state, s.sp)
		if err != nil {
			SignInFailed(w, r, http.StatusBadGateway, "The SAML authentication request could not be signed.")
			return
		}
		http.Redirect(w, r, u.String(), http.StatusFound)
		return
	}
	// HTTP-POST binding: a page whose form the browser posts to the IdP at once.
	postPage(w, "Signing in", req.Post(state))
}

// saveFlow keeps a sign-in's state like Sessions.SaveFlow, but with SameSite=None: the IdP's
// answer comes back as a cross-site POST, which a browser sends no Lax cookie with.
func (s *SAML) saveFlow(w http.ResponseWriter, state string, f samlFlow) error {
	rec := &headerOnly{h: http.Header{}}
	if err := s.sessions.SaveFlow(rec, state, f); err != nil {
		return err
	}
	for _, c := range (&http.Response{Header: rec.h}).Cookies() {
		c.SameSite = http.SameSiteNoneMode
		c.Secure = true
		http.SetCookie(w, c)
	}
	return nil
}

// headerOnly is a ResponseWriter that keeps the headers written to it (the cookie SaveFlow
// sets) and nothing else.
type headerOnly struct{ h http.Header }

func (h *headerOnly) Header() http.Header         { return h.h }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerOnly) WriteHeader(int)             {}
