-- Sign-in sessions ended by an identity provider's single logout (store/revocations.go). A
-- session is a sealed cookie, so ending one before it expires needs a record every replica
-- reads: the sessions of subject (a hash of a SAML NameID, or of a NameID and a session index)
-- in scope (a route) issued at or before revoked_at are ended. expires_at is when no such
-- session can be alive anyway (its maximum duration has passed), after which the row counts as
-- absent and is deleted. Transient: not part of backups.
CREATE TABLE session_revocations (
    scope TEXT COLLATE "C" NOT NULL,
    subject TEXT COLLATE "C" NOT NULL,
    revoked_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (scope, subject)
);
-- Replicas read the revocations recorded since they last looked, and the sweep the expired ones.
CREATE INDEX session_revocations_revoked ON session_revocations (revoked_at);
CREATE INDEX session_revocations_expires ON session_revocations (expires_at);
