-- The data plane's state. system_secrets holds deployment-wide secrets that belong to no account
-- (edgeplane's own CA): the public part in the clear, the private part encrypted like the
-- secrets of objects (store/secrets.go), with the name as additional data.
CREATE TABLE system_secrets (
    name       TEXT PRIMARY KEY,
    public     TEXT NOT NULL,
    sealed     TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- Online agent sessions and their tunnels, one row each, written by the replica that holds the
-- session, so every replica's API lists every replica's agents. seen_at is refreshed by the
-- holding replica while it lives; rows older than the heartbeat tolerance belong to a replica
-- that died and are neither listed nor kept. conn names the connection that wrote the row: an
-- agent that reconnects keeps its session id, and the old connection's cleanup must not delete
-- the new connection's rows.
CREATE TABLE agent_sessions (
    id            TEXT COLLATE "C" PRIMARY KEY,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    credential_id TEXT NOT NULL,
    replica       TEXT NOT NULL,
    conn          TEXT NOT NULL,
    seen_at       TEXT NOT NULL,
    doc           TEXT NOT NULL
);
CREATE INDEX agent_sessions_account ON agent_sessions (account_id, id);
CREATE INDEX agent_sessions_replica ON agent_sessions (replica);

CREATE TABLE agent_tunnels (
    id         TEXT COLLATE "C" PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL,
    doc        TEXT NOT NULL
);
CREATE INDEX agent_tunnels_account ON agent_tunnels (account_id, id);
CREATE INDEX agent_tunnels_session ON agent_tunnels (session_id);
