-- The public name each online tunnel serves, so that a name in live use is held by one account
-- across every replica (store/holds.go): name is the hostname of an http, https or tls bind, or
-- the address host:port of a tcp bind ('' for a labeled tunnel); zone is the hostname's parent
-- (the domain a wildcard one level up covers), '' for an address. A bind checks the other
-- accounts' online rows of its name, and a reservation the rows of the name (or, for a
-- wildcard, of its zone), under one lock per name.
ALTER TABLE agent_tunnels ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_tunnels ADD COLUMN zone TEXT NOT NULL DEFAULT '';
CREATE INDEX agent_tunnels_name ON agent_tunnels (name) WHERE name <> '';
CREATE INDEX agent_tunnels_zone ON agent_tunnels (zone) WHERE zone <> '';
