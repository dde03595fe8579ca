-- Secrets of objects (private keys of TLS certificates and SSH certificate authorities), kept
-- beside the object's JSON document and never inside it, so no response can show them. One row
-- per object, deleted with it. store/secrets.go is the only code reading or writing this table.
CREATE TABLE secrets (
    object_id  TEXT PRIMARY KEY REFERENCES objects (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL,
    data       TEXT NOT NULL
);
