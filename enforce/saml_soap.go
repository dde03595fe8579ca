package enforce

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/crewjam/saml"
)

// Back-channel single logout: the IdP POSTs a SOAP envelope holding a signed LogoutRequest to the
// SLO URL, server to server, with no browser and so no cookie. crewjam/saml reads and checks it
// (an enveloped XML signature by a certificate of idp_metadata is required, as the SOAP binding
// has no other way to authenticate the IdP; issuer, destination when given, IssueInstant and
// NotOnOrAfter); the request is then taken once only and the sessions it names are ended on
// every replica (Revocations), exactly as for the browser bindings. The IdP is answered with a
// LogoutResponse signed by the route's key in a SOAP envelope: Success once the sessions are
// recorded as ended, else a SAML error status.
//
// The SAML SOAP binding (saml-bindings §3.2.3.3) answers a SAML-level refusal with HTTP 200 and
// the refusal in the response's Status, not with an HTTP error or a SOAP fault, so that is what
// the IdP gets; the ngrok-error-code header names the refusal as on every other error of the
// module. Only a body that never became a SAML message (too large, too slow) gets an HTTP error.

// maxSOAPBody bounds the SOAP envelope an IdP posts to the SLO URL: a signed LogoutRequest with
// a few session indexes is a few KiB.
const maxSOAPBody = 64 << 10

// soapLogout takes a back-channel LogoutRequest (saml.IsSOAPRequest).
func (s *SAML) soapLogout(w http.ResponseWriter, r *http.Request) {
	timed := boundBodyTime(w, r, s.bodyTimeout)
	r.Body = http.MaxBytesReader(w, timed, maxSOAPBody)
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		SignInFailed(w, r, http.StatusRequestEntityTooLarge, "The identity provider's SOAP logout request is too large.")
		return
	case timedOut(err):
		SignInFailed(w, r, http.StatusRequestTimeout, "The identity provider's SOAP logout request did not arrive in time.")
		return
	case err != nil:
		SignInFailed(w, r, http.StatusBadRequest, "The identity provider's SOAP logout request could not be read.")
		return
	}
	timed.lift()
	req, err := s.sp.ParseXMLSOAPLogoutRequest(body)
	if err != nil || req.NameID == nil || req.NameID.Value == "" {
		// Not authenticated as the IdP's: no InResponseTo, since its ID cannot be trusted.
		s.soapAnswer(w, r, "", saml.StatusRequester, saml.StatusRequestDenied, CodeSignInFailed)
		return
	}
	if s.useOnce == nil || s.revocations == nil {
		s.soapAnswer(w, r, req.ID, saml.StatusResponder, "", 3210)
		return
	}
	fresh, err := s.useOnce(r.Context(), s.onceScope+":logout", req.ID, s.logoutKeptUntil(req))
	if err != nil {
		s.soapAnswer(w, r, req.ID, saml.StatusResponder, "", 3210)
		return
	}
	if !fresh {
		s.soapAnswer(w, r, req.ID, saml.StatusRequester, saml.StatusRequestDenied, CodeSignInFailed)
		return
	}
	if err := s.revoke(r, req.NameID.Value, sessionIndexes(req)); err != nil {
		s.soapAnswer(w, r, req.ID, saml.StatusResponder, "", 3210)
		return
	}
	s.soapAnswer(w, r, req.ID, saml.StatusSuccess, "", 0)
}

// soapAnswer writes the signed LogoutResponse to the LogoutRequest id ("" when the request could
// not be trusted) with status (and second, a second-level status, when not ""), naming code in
// ngrok-error-code when it is not 0. The answer is HTTP 200 whatever the status (saml-bindings
// §3.2.3.3); when it cannot even be signed, a 500 with a SOAP fault tells the IdP so.
func (s *SAML) soapAnswer(w http.ResponseWriter, r *http.Request, id, status, second string, code int) {
	st := saml.Status{StatusCode: saml.StatusCode{Value: status}}
	if second != "" {
		st.StatusCode.StatusCode = &saml.StatusCode{Value: second}
	}
	if code != 0 {
		countAnswer(r, code)
		w.Header().Set("ngrok-error-code", errorCode(code))
	}
	resp, err := s.sp.MakeSOAPLogoutResponse(id, st)
	if err != nil {
		_ = saml.WriteSOAPFault(w, "the logout response could not be signed")
		return
	}
	_ = saml.WriteSOAPLogoutResponse(w, resp)
}

// sessionIndexes are the non-empty SessionIndexes of a LogoutRequest.
func sessionIndexes(req *saml.LogoutRequest) []string {
	var out []string
	for _, i := range req.AllSessionIndexes() {
		if i.Value != "" {
			out = append(out, i.Value)
		}
	}
	return out
}

// logoutKeptUntil is until when a taken LogoutRequest's id is kept used: while crewjam/saml would
// still accept its IssueInstant, and at least the clock skew from now.
func (s *SAML) logoutKeptUntil(req *saml.LogoutRequest) time.Time {
	until := req.IssueInstant.Add(saml.MaxIssueDelay + saml.MaxClockSkew)
	if now := s.sessions.Now(); until.Before(now) {
		until = now.Add(saml.MaxClockSkew)
	}
	return until
}
