-- Paging indexes that only the paging queries can use. Pages are read newest first by id
-- (WHERE account_id = ? AND kind = ? AND id < ? ORDER BY id DESC). With an index on plain id,
-- PostgreSQL's planner may walk the primary key backwards instead and filter by account: it
-- assumes an account's rows are spread evenly over the id order, but ids are time-ordered, so an
-- account whose objects are older than a big account's newer ones had every page walk past all of
-- those (with prepared statements' generic plans this happened with three accounts and 20,000
-- rows). The paging queries order by the expression id || '' (the same bytes, compared the same
-- way), which only these indexes provide, so every page is an index range scan of the account's
-- (or the parent's) own objects on both engines, whatever the planner estimates.
DROP INDEX objects_page;
CREATE INDEX objects_page ON objects (account_id, kind, (id || ''));
DROP INDEX objects_parent;
CREATE INDEX objects_parent ON objects (parent_id, account_id, kind, (id || ''));
