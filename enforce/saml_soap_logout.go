package enforce

import (
	"context"
	"errors"
	"net/http"

	"github.com/crewjam/saml"
)

// Logout started here, back-channel: when the IdP's metadata offers single logout with the SOAP
// binding only (no HTTP-POST or HTTP-Redirect service to send the browser to), edgeplane sends
// the IdP a LogoutRequest for the session itself, server to server. crewjam/saml makes it,
// signs it with the route's key (an enveloped XML signature, the SOAP binding's only way to show
// the IdP who asks) and checks the answer: a LogoutResponse to this request, from the IdP, signed
// by a certificate of idp_metadata, recent, with a Success status. The request goes as
// artifact resolution's does: over the service provider's HTTPClient (the guarded outbound
// client with its 1 MiB limit on answers; crewjam/saml reads at most MaxSOAPLogoutMessageSize
// too), to the https location of idp_metadata only, within soapTimeout. The session here ends
// whatever the IdP says: the browser asked to be signed out, and a refusal, an unreachable IdP
// or an answer that fails a check only means the IdP's session may remain, which the page says
// and the data plane's log records as a warning.

// soapLogoutAtIdP asks the IdP's SOAP single logout service to end sess's session there, and
// returns why it did not ("" when it confirmed).
func (s *SAML) soapLogoutAtIdP(ctx context.Context, sess *Session) string {
	req, err := s.sp.MakeSOAPLogoutRequest(saml.NameID{Value: sess.UserID}, saml.WithSessionIndex(sess.SessionIndex))
	if err != nil {
		return "the logout request could not be made: " + short(err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, soapTimeout)
	defer cancel()
	_, err = s.sp.SendSOAPLogoutRequest(ctx, req)
	var ire *saml.InvalidResponseError
	var bad saml.ErrBadStatus
	switch {
	case err == nil:
		return ""
	case errors.As(err, &bad):
		return "it answered with the status " + short(bad.Status)
	case errors.As(err, &ire):
		return "its answer was refused: it is not a LogoutResponse to this request signed by the identity provider of this route's metadata"
	default:
		return "it could not be asked: " + fetchFailure(err)
	}
}

// soapOnlyLogout ends the session here, then at the IdP over SOAP; the page says whether the
// IdP confirmed.
func (s *SAML) soapOnlyLogout(w http.ResponseWriter, r *http.Request, sess *Session) {
	why := s.soapLogoutAtIdP(r.Context(), sess)
	if why == "" {
		s.sessions.Logout(w, r)
		return
	}
	s.log.Warn("saml: the identity provider did not confirm a back-channel logout; the session ended here only",
		"route", s.routeID, "idp", s.sp.IDPMetadata.EntityID, "why", why)
	s.sessions.Clear(w)
	SignInFailed(w, r, http.StatusBadGateway, "You are signed out of this site, but the identity provider did not confirm the logout ("+why+"): your session there may remain.")
}
