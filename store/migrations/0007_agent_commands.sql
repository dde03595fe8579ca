-- Commands (restart, stop, update) asked through one replica's API for an agent session held by
-- another replica: the holding replica takes its rows, sends the command to its agent and
-- writes the outcome; the asking replica reads it and deletes the row. Rows older than a minute
-- are dropped by the holding replica's housekeeping.
CREATE TABLE agent_commands (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    replica    TEXT NOT NULL,
    command    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    done       INTEGER NOT NULL,
    outcome    TEXT NOT NULL
);
CREATE INDEX agent_commands_replica ON agent_commands (replica, done);
