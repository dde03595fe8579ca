package enforce

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/crewjam/saml"
)

// The assertion consumer service of the saml module: the IdP's answer is checked by
// crewjam/saml (signature by a certificate of the IdP's metadata, issuer, destination and
// recipient = the ACS URL, audience = the entity id, time conditions, InResponseTo = the
// request this browser's sign-in sent), then the user's groups, then that the assertion was
// never accepted before (on any replica), then a session starts.

// The attribute names (a SAML Attribute's Name or FriendlyName, compared without case) read
// from an assertion. Groups: the common names of group membership across IdPs (Okta, Entra ID,
// ADFS, Google, Keycloak, Shibboleth/eduPerson, JumpCloud, OneLogin).
var (
	samlEmailAttrs = []string{"email", "mail", "emailaddress", "email_address", "user.email",
		"http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress", "urn:oid:0.9.2342.19200300.100.1.3"}
	samlNameAttrs = []string{"name", "displayname", "display_name", "cn", "user.displayname",
		"http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name", "http://schemas.microsoft.com/identity/claims/displayname",
		"urn:oid:2.16.840.1.113730.3.1.241", "urn:oid:2.5.4.3"}
	samlGroupAttrs = []string{"groups", "group", "memberof", "ismemberof", "member_of",
		"http://schemas.microsoft.com/ws/2008/06/identity/claims/groups", "http://schemas.xmlsoap.org/claims/group",
		"urn:oid:1.3.6.1.4.1.5923.1.5.1.1", "urn:oid:1.2.840.113556.1.2.102"}
)

// maxGroupsKept bounds the groups a session carries (only those of authorized_groups are kept).
const maxGroupsKept = 64

// maxAssertionKept bounds how long an accepted assertion's id is kept used: an IdP's
// NotOnOrAfter far ahead would otherwise keep its row that long, while crewjam/saml refuses an
// assertion issued more than MaxIssueDelay ago anyway.
const maxAssertionKept = 24 * time.Hour

// serveACS takes the IdP's answer: a POSTed SAMLResponse (HTTP-POST binding), or a SAMLart
// (HTTP-Artifact binding, in the query of a GET or in a POSTed form) that names the answer the
// IdP keeps for edgeplane to fetch (saml_artifact.go). Both go through the same checks.
func (s *SAML) serveACS(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		if !parsePostedForm(w, r, s.bodyTimeout, "The identity provider's answer") {
			return
		}
	case http.MethodGet:
		if r.URL.Query().Get("SAMLart") == "" {
			w.Header().Set("Allow", "POST")
			SignInFailed(w, r, http.StatusMethodNotAllowed, "The assertion consumer service takes the identity provider's POST, or a GET with a SAMLart.")
			return
		}
		_ = r.ParseForm() // the query only: a GET has no form body
	default:
		w.Header().Set("Allow", "GET, POST")
		SignInFailed(w, r, http.StatusMethodNotAllowed, "The assertion consumer service takes the identity provider's POST, or a GET with a SAMLart.")
		return
	}
	encoded, artifact, relay := r.PostForm.Get("SAMLResponse"), r.Form.Get("SAMLart"), r.Form.Get("RelayState")
	if encoded == "" && artifact == "" {
		SignInFailed(w, r, http.StatusBadRequest, "The identity provider's answer has no SAMLResponse or SAMLart.")
		return
	}
	var ids []string
	var back string
	var f samlFlow
	switch {
	case s.sessions.OpenFlow(w, r, relay, &f) && !f.Logout:
		ids, back = []string{f.ID}, s.sessions.LocalPath(f.Return)
	case s.allowIdP:
		// IdP-initiated: only a response to no request is admitted, and the RelayState, when
		// the IdP sets one, is the URL to go to (on this host only).
		ids, back = nil, s.relayTarget(relay, r.Host)
	default:
		ErrorPage(w, r, http.StatusBadRequest, CodeSAMLRelayState,
			"SAML RelayState parameter is invalid: no sign-in started here is waiting for this answer (it expired or was already used, or the identity provider started it and this route does not allow IdP-initiated sign-in).")
		return
	}
	var a *saml.Assertion
	if artifact != "" {
		if a = s.resolveArtifact(w, r, ids); a == nil {
			return
		}
	} else {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
		if err != nil {
			SignInFailed(w, r, http.StatusBadRequest, "The SAMLResponse is not base64.")
			return
		}
		if a, err = s.sp.ParseXMLResponse(raw, ids, s.acsURL); err != nil {
			SignInFailed(w, r, http.StatusForbidden, "The identity provider's answer was refused: it is not signed by the identity provider of this route's metadata, or it is not for this service provider, this sign-in or this time.")
			return
		}
	}
	id, groups := s.identityOf(a)
	if id.UserID == "" {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's assertion names no subject.")
		return
	}
	if !s.allowed(groups) {
		notInGroup(w, r)
		return
	}
	id.Groups = s.kept(groups)
	if !s.firstUse(w, r, a) {
		return
	}
	if _, err := s.sessions.Start(w, r, id); err != nil {
		SignInFailed(w, r, http.StatusBadRequest, "The signed-in identity is too large for a session.")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// firstUse records the accepted assertion's id as used until the assertion expires and reports
// whether this is its first use, answering the request when it is not: a replay (the POST and
// the sign-in cookie captured, or an IdP-initiated answer) is 403 ERR_NGROK_5211. The check
// fails closed: without a record of used assertions (none configured, or the store
// unavailable) the answer is refused with 503 ERR_NGROK_3210, never accepted unrecorded.
func (s *SAML) firstUse(w http.ResponseWriter, r *http.Request, a *saml.Assertion) bool {
	if s.useOnce == nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The saml module of this route has no record of used assertions, so it accepts none.")
		return false
	}
	if a.ID == "" {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's assertion has no ID, so it cannot be accepted once only.")
		return false
	}
	now := saml.TimeNow()
	fresh, err := s.useOnce(r.Context(), s.onceScope, a.ID, assertionExpiry(a, now))
	if err != nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The saml module could not record the assertion as used (its database is unavailable); sign in again in a moment.")
		return false
	}
	if !fresh {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's assertion was already used: each assertion signs in once only.")
		return false
	}
	return true
}

// assertionExpiry is until when an assertion accepted at now must be kept used: until it could
// pass the checks no longer, the latest NotOnOrAfter of its conditions and subject
// confirmations plus the clock skew allowed; at least the IssueInstant window plus that skew
// (an assertion without NotOnOrAfter, or one whose IdP's clock runs ahead), at most
// maxAssertionKept.
func assertionExpiry(a *saml.Assertion, now time.Time) time.Time {
	var end time.Time
	if a.Conditions != nil {
		end = a.Conditions.NotOnOrAfter
	}
	if a.Subject != nil {
		for _, c := range a.Subject.SubjectConfirmations {
			if d := c.SubjectConfirmationData; d != nil && d.NotOnOrAfter.After(end) {
				end = d.NotOnOrAfter
			}
		}
	}
	end = end.Add(saml.MaxClockSkew)
	issued := a.IssueInstant
	if now.After(issued) {
		issued = now
	}
	if low := issued.Add(saml.MaxIssueDelay + saml.MaxClockSkew); end.Before(low) {
		end = low
	}
	if high := now.Add(maxAssertionKept); end.After(high) {
		end = high
	}
	return end
}

// relayTarget is where an IdP-initiated sign-in goes: the RelayState's path when it is a path
// or a URL of this host, else the route's root.
func (s *SAML) relayTarget(relay, host string) string {
	if u, err := url.Parse(relay); err == nil && u.IsAbs() && (u.Scheme == "https" || u.Scheme == "http") && strings.EqualFold(u.Host, host) {
		relay = u.RequestURI()
	}
	if relay == "" {
		return s.returnBase
	}
	return s.sessions.LocalPath(relay)
}

// identityOf reads who signed in: the NameID is the user id (and the email with the
// emailAddress format), email and name come from the first attribute of samlEmailAttrs and
// samlNameAttrs, groups from every attribute of samlGroupAttrs.
func (s *SAML) identityOf(a *saml.Assertion) (Identity, []string) {
	id := Identity{Provider: "saml"}
	for _, st := range a.AuthnStatements {
		if st.SessionIndex != "" { // what the IdP's LogoutRequest names this session by
			id.SessionIndex = st.SessionIndex
			break
		}
	}
	if a.Subject != nil && a.Subject.NameID != nil {
		id.UserID = strings.TrimSpace(a.Subject.NameID.Value)
		if s.nameIDIsEmail || a.Subject.NameID.Format == string(saml.EmailAddressNameIDFormat) {
			id.Email = id.UserID
		}
	}
	var groups []string
	for _, st := range a.AttributeStatements {
		for _, at := range st.Attributes {
			is := func(names []string) bool {
				return slices.ContainsFunc(names, func(n string) bool {
					return strings.EqualFold(n, at.Name) || at.FriendlyName != "" && strings.EqualFold(n, at.FriendlyName)
				})
			}
			switch {
			case is(samlGroupAttrs):
				for _, v := range at.Values {
					if g := strings.TrimSpace(v.Value); g != "" {
						groups = append(groups, g)
					}
				}
			case is(samlEmailAttrs) && id.Email == "" && len(at.Values) > 0:
				id.Email = strings.TrimSpace(at.Values[0].Value)
			case is(samlNameAttrs) && id.Name == "" && len(at.Values) > 0:
				id.Name = strings.TrimSpace(at.Values[0].Value)
			}
		}
	}
	return id, groups
}

// allowed reports whether groups pass authorized_groups: anyone when none are configured,
// else a member of one of them (names compared exactly, as the IdP sends them).
func (s *SAML) allowed(groups []string) bool {
	if len(s.groups) == 0 {
		return true
	}
	return slices.ContainsFunc(groups, func(g string) bool { _, ok := slices.BinarySearch(s.groups, g); return ok })
}

// kept is the part of groups a session carries: the authorized ones (what later checks need).
func (s *SAML) kept(groups []string) []string {
	var out []string
	for _, g := range groups {
		if _, ok := slices.BinarySearch(s.groups, g); ok && !slices.Contains(out, g) && len(out) < maxGroupsKept {
			out = append(out, g)
		}
	}
	return out
}

// notInGroup answers a signed-in user who is in none of authorized_groups: 403 ERR_NGROK_5312.
func notInGroup(w http.ResponseWriter, r *http.Request) {
	ErrorPage(w, r, http.StatusForbidden, CodeSAMLNotInGroup, "You are not a member of the configured authorized groups on this edge.")
}
