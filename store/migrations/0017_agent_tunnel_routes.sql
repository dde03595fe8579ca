-- What a replica needs to carry public traffic to the tunnels of another replica's agents: the
-- bind's protocol, labels, pooling and TLS settings (their digest: every pooled bind of an
-- endpoint must ask the same of the clients' TLS, on any replica), and its options (the modules
-- it asked for), sealed like every other secret because they hold basic-auth passwords, OAuth
-- and OIDC client secrets, webhook secrets and TLS termination keys. gen is the value of the
-- replica's generation at the row's last write.
ALTER TABLE agent_tunnels ADD COLUMN proto TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_tunnels ADD COLUMN labels TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_tunnels ADD COLUMN pooled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_tunnels ADD COLUMN tls_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_tunnels ADD COLUMN opts TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_tunnels ADD COLUMN gen BIGINT NOT NULL DEFAULT 0;
-- Each replica's link address (--peer-advertise; '' without a link) and a generation counter
-- bumped in the same transaction as any change to the replica's tunnel rows: the other replicas
-- poll this small table and read again the tunnels of a replica whose generation moved.
ALTER TABLE agent_replicas ADD COLUMN peer_addr TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_replicas ADD COLUMN gen BIGINT NOT NULL DEFAULT 0;
