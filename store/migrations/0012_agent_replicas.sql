-- The liveness of the replicas that hold agent sessions (issue 22). A replica refreshes its own
-- row here every few seconds, where it used to refresh every one of its session rows: 10,000
-- row writes every 5 s with 10,000 agents online. A session (and its tunnels) is online while
-- its replica's row is fresh; a replica that dies stops refreshing, and its sessions are neither
-- listed nor kept. agent_sessions.seen_at now records when the session came online.
CREATE TABLE agent_replicas (
    replica TEXT COLLATE "C" PRIMARY KEY,
    seen_at TEXT NOT NULL
);
