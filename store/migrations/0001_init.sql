-- The whole model: every object is a JSON document in "objects"; the side tables hold what both
-- engines must enforce inside the same transaction as the write (token lookup, references,
-- globally unique claims). Portable DDL: the only engine difference is COLLATE "C" on ids, which
-- makes PostgreSQL sort them bytewise (KSUID order) whatever its locale; SQLite drops it.

CREATE TABLE accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

-- Users (usr_, admin or member) and bot users (bot_) that own keys and credentials.
CREATE TABLE principals (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    active     INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX principals_account ON principals (account_id);

CREATE TABLE objects (
    id         TEXT COLLATE "C" PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    parent_id  TEXT COLLATE "C" REFERENCES objects (id) ON DELETE CASCADE,
    version    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    doc        TEXT NOT NULL
);
-- Newest-first paging: WHERE account_id = ? AND kind = ? AND id < ? ORDER BY id DESC.
CREATE INDEX objects_page ON objects (account_id, kind, id);
CREATE INDEX objects_parent ON objects (parent_id, id);

-- Bearer tokens of API keys and credentials: a selector for the lookup and the SHA-256 of the
-- secret, hex-encoded. The plain token is never stored.
CREATE TABLE tokens (
    selector     TEXT PRIMARY KEY,
    hash         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    account_id   TEXT NOT NULL,
    object_id    TEXT NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    principal_id TEXT NOT NULL REFERENCES principals (id) ON DELETE CASCADE
);
CREATE INDEX tokens_object ON tokens (object_id);
CREATE INDEX tokens_principal ON tokens (principal_id);

-- Enforced references: mode 1 refuses deleting to_id while the row exists, mode 2 deletes from_id
-- with it.
CREATE TABLE refs (
    from_id TEXT NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    to_id   TEXT NOT NULL,
    mode    INTEGER NOT NULL,
    PRIMARY KEY (from_id, to_id)
);
CREATE INDEX refs_to ON refs (to_id);

-- Values unique across all accounts (domain names, hostports, TCP addresses, route matches).
CREATE TABLE claims (
    namespace  TEXT NOT NULL,
    value      TEXT NOT NULL,
    account_id TEXT NOT NULL,
    object_id  TEXT NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    PRIMARY KEY (namespace, value)
);
CREATE INDEX claims_object ON claims (object_id);
