package server

import (
	"context"
	"net/http"

	ep "github.com/edgeplane/edgeplane"
)

// Commander sends a command (ep.CommandRestart, CommandStop, CommandUpdate) to an online agent
// session held by the replica named replica. Its errors are *ep.Error values the API answers
// with as they are.
type Commander interface {
	Command(ctx context.Context, sessionID, replica, command string) error
}

// registerLive serves the live collections (ep.LiveResources): list and get with the generic
// handlers, reading online agents' rows, and each collection's commands.
func (s *Server) registerLive(agents Commander) {
	for _, res := range ep.LiveResources {
		c := newCollection(res)
		c.live = true
		s.api(route{"GET", res.Path, ep.OpList, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.list(w, r, c) })
		s.api(route{"GET", res.Path + "/{id}", ep.OpGet, c, nil, ""}, func(w http.ResponseWriter, r *http.Request) error { return s.getLive(w, r, c) })
		for _, action := range res.Actions {
			s.api(route{"POST", res.Path + "/{id}/" + action, ep.OpUpdate, c, nil, action}, func(w http.ResponseWriter, r *http.Request) error {
				return s.command(w, r, c, agents, action)
			})
		}
	}
}

// getLive answers GET of an online agent session or tunnel.
func (s *Server) getLive(w http.ResponseWriter, r *http.Request, c *collection) error {
	doc, _, err := s.store.GetLive(r.Context(), c.res, callerOf(r).AccountID, r.PathValue("id"))
	if err != nil {
		return err
	}
	s.resolve(c, "", doc)
	s.writeJSON(w, http.StatusOK, doc)
	return nil
}

// command sends a command to an online session: 204 once the agent has acknowledged it.
func (s *Server) command(w http.ResponseWriter, r *http.Request, c *collection, agents Commander, action string) error {
	var body struct{ ep.Echo } // {} or {"id": ...}, as clients send
	if err := s.decode(r, &body, r.PathValue("id"), ""); err != nil {
		return err
	}
	_, replica, err := s.store.GetLive(r.Context(), c.res, callerOf(r).AccountID, r.PathValue("id"))
	if err != nil {
		return err
	}
	if agents == nil {
		return &ep.Error{Status: http.StatusServiceUnavailable, Code: ep.CodeSessionElsewhere,
			Msg: "This server's data plane is off (--agent-listen is empty), so it cannot send commands to agents."}
	}
	if err := agents.Command(r.Context(), r.PathValue("id"), replica, action); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
