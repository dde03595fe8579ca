-- Weighted backends take the id prefix ngrok's API gives them, bkdwd_ (they were bkdwt_). The
-- KSUID after the prefix is kept, so each object keeps its place in its list, and an old id in a
-- path or a before_id cursor still names it (ep.Resource.OldPrefix). Every stored occurrence is
-- rewritten: the objects themselves (a copy under the new id, then the old row goes), the refs
-- from and to them, and the documents that reference them (failover and weighted backends, edge
-- backend modules): in those, every JSON string starting with bkdwt_ becomes bkdwd_. Weighted
-- backends have no children, tokens, claims or secrets. Import re-applies this file to a backup
-- of an older schema (backup.go).
INSERT INTO objects (id, account_id, kind, parent_id, version, created_at, doc)
    SELECT 'bkdwd_' || substr(id, 7), account_id, kind, parent_id, version, created_at,
           replace(doc, '"bkdwt_', '"bkdwd_')
    FROM objects WHERE kind = 'weighted_backend' AND substr(id, 1, 6) = 'bkdwt_';
UPDATE objects SET doc = replace(doc, '"bkdwt_', '"bkdwd_')
    WHERE id IN (SELECT from_id FROM refs WHERE substr(to_id, 1, 6) = 'bkdwt_');
UPDATE refs SET from_id = 'bkdwd_' || substr(from_id, 7) WHERE substr(from_id, 1, 6) = 'bkdwt_';
UPDATE refs SET to_id = 'bkdwd_' || substr(to_id, 7) WHERE substr(to_id, 1, 6) = 'bkdwt_';
DELETE FROM objects WHERE kind = 'weighted_backend' AND substr(id, 1, 6) = 'bkdwt_';
