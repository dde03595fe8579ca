package enforce

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/crewjam/saml"
)

// The HTTP-Artifact binding at the ACS: the browser brings a SAMLart, a reference to the answer
// the IdP keeps; edgeplane fetches that answer from the IdP's ArtifactResolutionService with an
// ArtifactResolve signed by the route's key over the SOAP binding. crewjam/saml does the
// exchange and its checks: the artifact must be a SAML 2.0 type 0x0004 artifact whose SourceID
// is this route's IdP (RequireStandardArtifacts: no request leaves for anyone else's), the
// service is the one of idp_metadata with the artifact's endpoint index, reached over https
// only; the ArtifactResponse must answer this ArtifactResolve, come from the IdP, be signed by it
// (or its Response be), and its Response then passes every check a POSTed one does, and is
// accepted once only like one (firstUse). The request goes through the data plane's guarded
// outbound client (no non-public address unless --outbound-allow-private), bounded in time
// (soapTimeout) and in size (the outbound client's 1 MiB limit on answers).

// soapTimeout bounds each SOAP exchange edgeplane starts with the IdP (artifact resolution at
// the ACS, back-channel logout at the SLO URL), connection to last byte: the browser waits for
// it. Both go through the service provider's HTTPClient, the guarded outbound client with its
// limit on answers' size.
const soapTimeout = 10 * time.Second

// resolveArtifact fetches and checks the answer the request's SAMLart names, answering the
// request itself and returning nil when it cannot be had: 400 for a SAMLart that is not an
// artifact, 403 for one of another IdP or an answer that fails a check (an unknown or used
// artifact gets an answer without a Response), 502 when the IdP's service cannot be reached
// or answers with no SAML message (a refused address, a timeout, an HTTP error, too large).
func (s *SAML) resolveArtifact(w http.ResponseWriter, r *http.Request, ids []string) *saml.Assertion {
	ctx, cancel := context.WithTimeout(r.Context(), soapTimeout)
	defer cancel()
	a, err := s.sp.ParseResponse(r.WithContext(ctx), ids)
	if err == nil {
		return a
	}
	var inner error = err
	if ire := (*saml.InvalidResponseError)(nil); errors.As(err, &ire) && ire.PrivateErr != nil {
		inner = ire.PrivateErr
	}
	switch {
	case !errors.Is(err, saml.ErrArtifactResolution):
		// The IdP answered: its answer was checked and refused.
		SignInFailed(w, r, http.StatusForbidden, "The identity provider's answer to the artifact was refused: it has no response for this artifact (unknown, or already resolved), or it is not signed by the identity provider of this route's metadata, or not for this service provider, this sign-in or this time.")
	case errors.Is(err, saml.ErrIssuerMismatch):
		SignInFailed(w, r, http.StatusForbidden, "The SAMLart was not issued by the identity provider of this route's metadata.")
	case errors.Is(err, saml.ErrMalformedMessage) || errors.Is(err, saml.ErrUnsupported):
		SignInFailed(w, r, http.StatusBadRequest, "The SAMLart is not a SAML 2.0 artifact.")
	default:
		SignInFailed(w, r, http.StatusBadGateway, "The identity provider's artifact resolution service could not be asked for the answer: "+fetchFailure(inner))
	}
	return nil
}
