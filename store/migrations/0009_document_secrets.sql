-- Module secrets kept inside documents (webhook secrets, OAuth and OIDC client secrets) are
-- sealed from this version on (store/docsecrets.go). The task row makes the first start after
-- this migration, which has the keys, seal the ones an older edgeplane stored in plaintext
-- (runPendingTasks); the documents that can hold them are found through objects_kind (0006).
CREATE TABLE store_tasks (
    name TEXT PRIMARY KEY
);
INSERT INTO store_tasks (name) VALUES ('seal-document-secrets');
