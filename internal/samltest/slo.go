package samltest

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"

	"github.com/crewjam/saml"
)

// Single logout at the test IdP, done by crewjam/saml's IdentityProvider (ServeSLO, StartLogout):
// the session provider below keeps the IdP's sessions and the service providers each was used
// for, so that a service provider's LogoutRequest ends the IdP session it names (and is refused
// for a session it took no part in), and an IdP-initiated logout sends each participant a signed
// LogoutRequest through the browser and takes their LogoutResponses at /slo.

// Session is one of the IdP's sessions: its id, the NameID and the index its assertions carry.
type Session struct{ ID, NameID, Index string }

// Sessions returns the IdP's sessions that have not been logged out, oldest first.
func (i *IdP) Sessions() []Session {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]Session, 0, len(i.sessions))
	for _, s := range i.sessions {
		out = append(out, Session{ID: s.ID, NameID: s.NameID, Index: s.Index})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// LogoutURL is the link of an IdP-initiated logout of the session id: the IdP sends every
// service provider the session was used for a LogoutRequest, then ends the session.
func (i *IdP) LogoutURL(id string) string { return i.Server.URL + "/logout?session=" + id }

// OnlySPLogoutBinding makes the IdP see only the SingleLogoutService of binding in service
// providers' metadata ("" for all), as an IdP configured with one of them: its LogoutRequests
// and LogoutResponses then go with that binding.
func (i *IdP) OnlySPLogoutBinding(binding string) {
	i.mu.Lock()
	i.spLogout = binding
	i.mu.Unlock()
}

// OnlyIdPLogoutBinding makes the IdP's metadata list its SingleLogoutService with binding only
// (all three, Redirect, POST and SOAP, when ""): give it to a route after calling this.
func (i *IdP) OnlyIdPLogoutBinding(binding string) {
	i.IDP.LogoutBindings = []string{saml.HTTPRedirectBinding, saml.HTTPPostBinding, saml.SOAPBinding}
	if binding != "" {
		i.IDP.LogoutBindings = []string{binding}
	}
}

// serveLogout starts the IdP-initiated logout of ?session=, ending the session once the
// participants have been asked.
func (i *IdP) serveLogout(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	s := i.sessions[r.URL.Query().Get("session")]
	i.mu.Unlock()
	if s == nil {
		http.Error(w, "no such session", http.StatusNotFound)
		return
	}
	i.IDP.StartLogout(w, r, s, "")
	i.mu.Lock()
	delete(i.sessions, s.ID)
	i.mu.Unlock()
}

// AddSessionParticipant records that the session was used to sign in to participant.
func (p sessionProvider) AddSessionParticipant(_ *http.Request, session *saml.Session, participant saml.SessionParticipant) error {
	i := p.i
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, x := range i.participants[session.ID] {
		if x == participant {
			return nil
		}
	}
	i.participants[session.ID] = append(i.participants[session.ID], participant)
	return nil
}

// SessionParticipants lists the participants of the sessions match selects.
func (p sessionProvider) SessionParticipants(_ *http.Request, match func(*saml.Session) bool) ([]saml.SessionParticipant, error) {
	i := p.i
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []saml.SessionParticipant
	for id, s := range i.sessions {
		if match(s) {
			out = append(out, i.participants[id]...)
		}
	}
	return out, nil
}

// InvalidateSession ends the sessions a service provider's valid LogoutRequest names.
func (p sessionProvider) InvalidateSession(_ http.ResponseWriter, _ *http.Request, req *saml.IdpLogoutRequest) error {
	i := p.i
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.refuseLogouts {
		return errors.New("the session store is down")
	}
	for id, s := range i.sessions {
		if req.MatchesSession(s) {
			delete(i.sessions, id)
		}
	}
	return nil
}

// BackChannelLogout logs the session id out at the IdP with no browser: crewjam/saml sends each
// service provider it was used for whose metadata has a SOAP SingleLogoutService (see
// OnlySPLogoutBinding) a signed LogoutRequest over the SOAP binding, with IDP.HTTPClient, and
// checks the signed LogoutResponse. It returns the IdP's final page, which names the service
// providers that could not log the session out, and ends the IdP session.
func (i *IdP) BackChannelLogout(id string) (status int, page string) {
	i.mu.Lock()
	s := i.sessions[id]
	i.mu.Unlock()
	if s == nil {
		return http.StatusNotFound, "no such session"
	}
	rec := httptest.NewRecorder()
	i.IDP.StartLogout(rec, httptest.NewRequest(http.MethodGet, i.LogoutURL(id), nil), s, "")
	i.mu.Lock()
	delete(i.sessions, s.ID)
	i.mu.Unlock()
	return rec.Code, rec.Body.String()
}

// RefuseLogouts makes the IdP fail to end the sessions service providers' LogoutRequests name
// (on) or end them again (off): it then answers each such request with the Responder status,
// as an IdP whose session store is down.
func (i *IdP) RefuseLogouts(on bool) {
	i.mu.Lock()
	i.refuseLogouts = on
	i.mu.Unlock()
}
