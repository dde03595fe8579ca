-- Whether a replica is draining after a handover: its successor serves on the same sockets and
-- its agents are about to reconnect there. The other replicas stop keeping the streams they
-- forward to its agents open between requests, which would hold its agents' sessions (and so
-- the agents) on it for its whole drain, out of its successor's reach.
ALTER TABLE agent_replicas ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
