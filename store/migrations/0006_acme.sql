-- Managed certificates (ACME). One row per reserved domain whose certificate is being ordered:
-- the lease that makes one replica at a time work on it (holder, lease_until), the ACME order in
-- progress (so a restart resumes it rather than ordering again), the number of failed attempts
-- (for the backoff), and the challenge being answered: every replica's public listeners answer
-- HTTP-01 and TLS-ALPN-01 for host from key_auth, whichever replica runs the job. No secret is
-- kept here: the account key is a deployment secret (system_secrets) and a certificate's key is
-- made at finalization and stored, encrypted, with the certificate (secrets).
CREATE TABLE acme_jobs (
    domain_id   TEXT COLLATE "C" PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    host        TEXT NOT NULL,
    holder      TEXT NOT NULL,
    lease_until TEXT NOT NULL,
    order_url   TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    token       TEXT NOT NULL,
    key_auth    TEXT NOT NULL
);
CREATE INDEX acme_jobs_host ON acme_jobs (host);

-- The certificate manager's scan reads the reserved domains of every account.
CREATE INDEX objects_kind ON objects (kind, id);
