-- The snapshot cache (store/snapcache.go) lists an account's ids and versions of one kind, in id
-- order, at every change of the account. This index answers that listing by itself, in order,
-- without visiting the table's rows or sorting.
CREATE INDEX objects_versions ON objects (account_id, kind, id, version);
