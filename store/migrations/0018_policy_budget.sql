-- Each object's share of its account's traffic policy budget (ep.PolicyUse): the key of the
-- compiled stage its enabled traffic policy uses (objects with one key share one stage, and count
-- once) and that stage's estimated cost. Written in the same transaction as the object, deleted
-- with it; a write whose document would take the account's total past the budget is refused.
CREATE TABLE policy_costs (
    object_id  TEXT COLLATE "C" PRIMARY KEY REFERENCES objects (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    use_key    TEXT NOT NULL,
    cost       BIGINT NOT NULL
);
CREATE INDEX policy_costs_account ON policy_costs (account_id, use_key);
-- The shares of the objects written before this table existed are filled in by the store's code
-- at its next start (policy_costs.go), which can estimate a document; SQL cannot.
INSERT INTO store_tasks (name) VALUES ('fill-policy-costs');
