-- SQLite only: its paging queries read objects_versions (account_id, kind, id, version), which
-- orders an account's objects of one kind by id as objects_page does, so objects_page is one
-- B-tree insert, and part of a WAL page, more per create that no query needs. SQLite compares
-- ids bytewise and takes the index the query names (INDEXED BY), so the reason for the id || ''
-- expression (PostgreSQL's planner walking the primary key instead, see 0003) does not arise.
-- PostgreSQL keeps objects_page.
DROP INDEX objects_page;
