-- Values that may be used only once across every replica until they expire (store/once.go): the
-- ids of the SAML assertions the saml module accepted, so a captured answer cannot sign anyone
-- in a second time. id is hex(sha256(the value)), so a value of any length makes a short key;
-- expires_at is when the value could no longer be accepted anyway, after which its row counts as
-- absent and is deleted. Transient: not part of backups.
CREATE TABLE used_once (
    scope TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (scope, id)
);
-- The sweep of expired rows reads them oldest first, a bounded batch at a time.
CREATE INDEX used_once_expires ON used_once (expires_at);
