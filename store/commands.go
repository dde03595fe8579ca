package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// AgentCommand is a command asked through one replica's API for a session another replica holds.
type AgentCommand struct {
	ID, SessionID, Command string
}

// QueueAgentCommand asks the replica holding a session to send it a command; it returns the
// command's id, for AgentCommandOutcome.
func (s *Store) QueueAgentCommand(ctx context.Context, replica, sessionID, command string) (string, error) {
	id, t := ep.NewID("cmd")
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO agent_commands (id, session_id, replica, command, created_at, done, outcome)
			VALUES (?, ?, ?, ?, ?, 0, '')`), id, sessionID, replica, command, ep.FormatTime(t))
		return s.classify(err)
	})
	return id, err
}

// PendingAgentCommands returns the commands waiting for this replica.
func (s *Store) PendingAgentCommands(ctx context.Context, replica string) ([]AgentCommand, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT id, session_id, command FROM agent_commands WHERE replica = ? AND done = 0`), replica)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []AgentCommand
	for rows.Next() {
		var c AgentCommand
		if err := rows.Scan(&c.ID, &c.SessionID, &c.Command); err != nil {
			return nil, s.classify(err)
		}
		out = append(out, c)
	}
	return out, s.classify(rows.Err())
}

// FinishAgentCommand records a command's outcome ("" when the agent carried it out).
func (s *Store) FinishAgentCommand(ctx context.Context, id, outcome string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE agent_commands SET done = 1, outcome = ? WHERE id = ?`), outcome, id)
		return s.classify(err)
	})
}

// AgentCommandOutcome returns whether the command is done and its outcome; a done command's row
// is deleted as it is read.
func (s *Store) AgentCommandOutcome(ctx context.Context, id string) (done bool, outcome string, err error) {
	var d int
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT done, outcome FROM agent_commands WHERE id = ?`), id).Scan(&d, &outcome)
	if errors.Is(err, sql.ErrNoRows) {
		return true, "gone", nil
	}
	if err != nil || d == 0 {
		return false, "", s.classify(err)
	}
	return true, outcome, s.DropAgentCommand(ctx, id)
}

// DropAgentCommand deletes a command (answered, or given up on).
func (s *Store) DropAgentCommand(ctx context.Context, id string) error {
	return s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_commands WHERE id = ?`), id)
		return s.classify(err)
	})
}

// expireAgentCommands drops commands older than a minute (their askers have given up).
func (s *Store) expireAgentCommands(ctx context.Context, tx *wtx) error {
	_, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM agent_commands WHERE created_at < ?`), ep.FormatTime(time.Now().Add(-time.Minute)))
	return s.classify(err)
}
