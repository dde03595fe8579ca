package enforce

import (
	"bytes"
	"errors"
	"net/http"
	"time"

	"github.com/crewjam/saml"
)

// Single logout of the saml module, both ways, with crewjam/saml signing and verifying the
// messages (enveloped XML signatures for HTTP-POST, query-string signatures for HTTP-Redirect):
//
//   - The user logs out here (/ngrok/logout, or the SLO URL without a SAML message): the session
//     ends, and when the IdP's metadata has a SingleLogoutService the browser takes a signed
//     LogoutRequest there; the IdP's LogoutResponse comes back to the SLO URL, where it is
//     checked against the request this browser's logout sent.
//   - The IdP sends a LogoutRequest to the SLO URL: once its signature and fields check, the
//     sessions it names are ended on every replica (a session is a sealed cookie, so a record in
//     the store, Revocations, keeps it from opening until it would have expired anyway), and the
//     IdP gets a signed LogoutResponse.

// Subjects of revocations: every session of a NameID, or the one with a session index.
func subjectAll(nameID string) string { return "n:" + nameID }
func subjectOne(nameID, index string) string {
	return "s:" + nameID + "\x00" + index
}

// revocationKeepUnbounded is how long the revocation of every session of a NameID is kept on a
// route whose sessions have no maximum duration: a session there may stay alive as long as it
// is used, so the record stays long; there is one per NameID, so they stay few.
const revocationKeepUnbounded = 365 * 24 * time.Hour

// checkRevoked reports whether sess was ended by a single logout, answering the request when it
// cannot be told (the store unreachable): 503, the session neither admitted nor ended.
func (s *SAML) checkRevoked(w http.ResponseWriter, r *http.Request, sess *Session) (revoked, answered bool) {
	if s.revocations == nil {
		return false, false
	}
	subjects := []string{subjectAll(sess.UserID)}
	if sess.SessionIndex != "" {
		subjects = append(subjects, subjectOne(sess.UserID, sess.SessionIndex))
	}
	revoked, err := s.revocations.Revoked(r.Context(), s.revScope, time.Unix(sess.IssuedAt, 0), subjects...)
	if err != nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The saml module could not read which sessions were ended by single logout (its database is unavailable); try again in a moment.")
		return false, true
	}
	return revoked, false
}

// revoke ends, on every replica, the sessions of nameID with one of indexes (all of them when
// none is given, or when sessions have no maximum duration, so one index could not be kept for
// as long as its session may live).
func (s *SAML) revoke(r *http.Request, nameID string, indexes []string) error {
	if s.revocations == nil {
		return errors.New("no record of ended sessions")
	}
	now := s.sessions.Now()
	if len(indexes) == 0 || s.maxDuration <= 0 {
		return s.revocations.Revoke(r.Context(), s.revScope, subjectAll(nameID), now.Add(s.keepAll()))
	}
	for _, idx := range indexes {
		if err := s.revocations.Revoke(r.Context(), s.revScope, subjectOne(nameID, idx), now.Add(s.maxDuration+saml.MaxClockSkew)); err != nil {
			return err
		}
	}
	return nil
}

// keepAll is how long the revocation of every session of a NameID must be kept.
func (s *SAML) keepAll() time.Duration {
	if s.maxDuration > 0 {
		return s.maxDuration + saml.MaxClockSkew
	}
	return revocationKeepUnbounded
}

// serveSLO is the SLO URL: the IdP's LogoutRequest or LogoutResponse (HTTP-Redirect in the
// query of a GET, HTTP-POST in a form, SOAP in a text/xml POST: saml_soap.go), else a logout the
// user asks for.
func (s *SAML) serveSLO(w http.ResponseWriter, r *http.Request) {
	if saml.IsSOAPRequest(r) {
		s.soapLogout(w, r)
		return
	}
	if r.Method == http.MethodPost {
		if !parsePostedForm(w, r, s.bodyTimeout, "The identity provider's logout message") {
			return
		}
	}
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodPost:
		w.Header().Set("Allow", "GET, POST")
		SignInFailed(w, r, http.StatusMethodNotAllowed, "The single logout service takes GET and POST.")
	case r.FormValue("SAMLRequest") != "":
		s.idpLogout(w, r)
	case r.FormValue("SAMLResponse") != "":
		s.logoutAnswered(w, r)
	default:
		s.startLogout(w, r)
	}
}

// startLogout ends the browser's session and, when it had one and the IdP has a single logout
// service, sends the browser there with a signed LogoutRequest for it, or, when the IdP's only
// service takes SOAP, sends the IdP that request itself (saml_soap_logout.go).
func (s *SAML) startLogout(w http.ResponseWriter, r *http.Request) {
	sess := s.sessions.Load(r)
	if sess == nil || (s.slo == "" && !s.soapSLO) {
		s.sessions.Logout(w, r)
		return
	}
	s.sessions.Clear(w)
	// A copy of the cookie must not outlive the logout either; the logout goes on when this
	// cannot be recorded, since the cookie is gone from the browser that asked.
	if sess.SessionIndex != "" && s.maxDuration > 0 {
		_ = s.revoke(r, sess.UserID, []string{sess.SessionIndex})
	}
	if s.slo == "" {
		s.soapOnlyLogout(w, r, sess)
		return
	}
	req, err := s.sp.MakeLogoutRequest(s.slo, sess.UserID, saml.WithSessionIndex(sess.SessionIndex))
	if err != nil {
		SignInFailed(w, r, http.StatusBadGateway, "The SAML logout request could not be made; you are signed out of this site only.")
		return
	}
	state := RandomToken()
	if err := s.saveFlow(w, state, samlFlow{ID: req.ID, Return: s.returnBase, Logout: true}); err != nil {
		SignInFailed(w, r, http.StatusBadRequest, "The logout could not be started; you are signed out of this site only.")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if s.sloBinding == saml.HTTPRedirectBinding {
		u, err := s.sp.RedirectLogoutRequestURL(req, state)
		if err != nil {
			SignInFailed(w, r, http.StatusBadGateway, "The SAML logout request could not be signed; you are signed out of this site only.")
			return
		}
		http.Redirect(w, r, u.String(), http.StatusFound)
		return
	}
	postPage(w, "Signing out", req.Post(state))
}

// logoutAnswered takes the IdP's LogoutResponse to this browser's logout.
func (s *SAML) logoutAnswered(w http.ResponseWriter, r *http.Request) {
	var f samlFlow
	if !s.sessions.OpenFlow(w, r, r.FormValue("RelayState"), &f) || !f.Logout {
		ErrorPage(w, r, http.StatusBadRequest, CodeSAMLRelayState,
			"SAML RelayState parameter is invalid: no logout started here is waiting for this answer (it expired or was already used).")
		return
	}
	if _, err := s.sp.ParseLogoutResponse(r, []string{f.ID}); err != nil {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's logout answer was refused: it is not signed by the identity provider of this route's metadata, not for this logout, or not a success. You are signed out of this site; your session at the identity provider may remain.")
		return
	}
	s.sessions.Logout(w, r)
}

// idpLogout takes the IdP's LogoutRequest: checked (signature by the IdP, destination, issuer,
// time, used once), the sessions it names are ended everywhere, and the IdP is answered.
func (s *SAML) idpLogout(w http.ResponseWriter, r *http.Request) {
	req, err := s.sp.ValidateLogoutRequest(r)
	if err != nil || req.NameID == nil || req.NameID.Value == "" {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's logout request was refused: it is not signed by the identity provider of this route's metadata, or it is not for this service provider or this time.")
		return
	}
	if s.useOnce == nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The saml module of this route has no record of used logout requests, so it accepts none.")
		return
	}
	fresh, err := s.useOnce(r.Context(), s.onceScope+":logout", req.ID, s.logoutKeptUntil(req))
	if err != nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The saml module could not record the logout request as used (its database is unavailable); it ended no session.")
		return
	}
	if !fresh {
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's logout request was already used: each logout request is taken once only.")
		return
	}
	if err := s.revoke(r, req.NameID.Value, sessionIndexes(req)); err != nil {
		ErrorPage(w, r, http.StatusServiceUnavailable, 3210, "The saml module could not record the ended sessions (its database is unavailable); the identity provider is not told they ended.")
		return
	}
	if sess := s.sessions.Load(r); sess != nil && sess.UserID == req.NameID.Value {
		s.sessions.Clear(w)
	}
	relay := r.FormValue("RelayState")
	w.Header().Set("Cache-Control", "no-store")
	// The answer goes back with the binding the request came with, when the IdP offers it.
	redirect := r.URL.Query().Get("SAMLRequest") != ""
	if loc := s.sp.GetSLOBindingLocation(saml.HTTPRedirectBinding); (redirect && loc != "") || s.sp.GetSLOBindingLocation(saml.HTTPPostBinding) == "" {
		u, err := s.sp.MakeRedirectLogoutResponse(req.ID, relay)
		if err != nil {
			SignInFailed(w, r, http.StatusBadGateway, "The SAML logout response could not be signed; the sessions ended.")
			return
		}
		http.Redirect(w, r, u.String(), http.StatusFound)
		return
	}
	form, err := s.sp.MakePostLogoutResponse(req.ID, relay)
	if err != nil {
		SignInFailed(w, r, http.StatusBadGateway, "The SAML logout response could not be signed; the sessions ended.")
		return
	}
	postPage(w, "Signed out", form)
}

// postPage answers with a page whose form the browser posts at once (HTTP-POST binding).
func postPage(w http.ResponseWriter, title string, form []byte) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><title>" + title + "</title></head><body>\n")
	b.Write(form)
	b.WriteString("\n</body></html>\n")
	_, _ = w.Write(b.Bytes())
}
