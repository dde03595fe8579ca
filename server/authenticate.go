package server

import (
	"context"

	ep "github.com/edgeplane/edgeplane"
)

// Authenticate checks an API key's token exactly as the API checks a bearer token, and returns
// its caller: the web console signs in with it, and checks its session's key again on every
// request. Its refusals are the API's 401 errors (an unknown, deleted or malformed key, an
// inactive bot user); a store that cannot be reached is the store's error.
func (s *Server) Authenticate(ctx context.Context, token string) (ep.Caller, error) {
	cred, err := parseCredential("Bearer " + token)
	if err != nil {
		return ep.Caller{}, err
	}
	caller, err := s.store.Authenticate(ctx, cred.selector, cred.secret)
	if err != nil {
		return ep.Caller{}, authError(err)
	}
	return caller, nil
}
