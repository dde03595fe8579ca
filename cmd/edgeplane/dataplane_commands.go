package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/tunnel"
)

// The API's commands to agent sessions (restart, stop, update), carried out by the replica
// holding the session: directly here, or queued in the store for the replica that holds it.

// commander is the data plane as the API's Commander, or nil when it is off.
func (d *dataPlane) commander() server.Commander {
	if d.gw == nil {
		return nil
	}
	return d
}

// Command sends an API command to an agent session of this replica.
func (d *dataPlane) Command(ctx context.Context, sessionID, replica, command string) error {
	var outcome string
	if replica == d.replica {
		switch err := d.gw.Command(ctx, sessionID, command); {
		case errors.Is(err, tunnel.ErrNotHere):
			outcome = tunnel.CommandGone
		case errors.Is(err, tunnel.ErrUnsupported):
			outcome = tunnel.CommandUnsupported
		case err != nil:
			outcome = tunnel.CommandFailed + err.Error()
		}
	} else {
		var err error
		if outcome, err = d.relayCommand(ctx, sessionID, replica, command); err != nil {
			return err
		}
	}
	switch {
	case outcome == "":
		return nil
	case outcome == tunnel.CommandGone:
		return ep.NotFound()
	case outcome == tunnel.CommandUnsupported:
		return &ep.Error{Status: http.StatusConflict, Code: ep.CodeCommandUnsupported,
			Msg: "The agent of tunnel session " + sessionID + " does not support the " + command + " command."}
	}
	return &ep.Error{Status: http.StatusBadGateway, Code: ep.CodeCommandFailed,
		Msg: "The agent did not carry out the " + command + " command: " + strings.TrimSpace(strings.TrimPrefix(outcome, tunnel.CommandFailed))}
}

// relayCommand queues a command for the replica holding the session and waits for its outcome,
// within the request's deadline.
func (d *dataPlane) relayCommand(ctx context.Context, sessionID, replica, command string) (string, error) {
	id, err := d.st.QueueAgentCommand(ctx, replica, sessionID, command)
	if err != nil {
		return "", err
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = d.st.DropAgentCommand(context.WithoutCancel(ctx), id)
			return "", &ep.Error{Status: http.StatusServiceUnavailable, Code: ep.CodeSessionElsewhere,
				Msg: "Tunnel session " + sessionID + " is held by replica " + replica + ", which did not carry out the command in time."}
		case <-t.C:
		}
		done, outcome, err := d.st.AgentCommandOutcome(ctx, id)
		if err != nil {
			return "", err
		}
		if done {
			return outcome, nil
		}
	}
}
