-- DNS-01 answers of managed certificates for wildcard domains: the job of such a domain answers
-- its challenge at the domain's acme_challenge_cname_target, a name of the CNAME zone that
-- edgeplane's DNS server (--dns-listen) is authoritative for. dns_name is that name ('' for a
-- job answering HTTP-01 or TLS-ALPN-01), so every replica's DNS server finds the answer of a
-- job another replica runs; the listeners' HTTP-01 and TLS-ALPN-01 lookups skip these rows.
ALTER TABLE acme_jobs ADD COLUMN dns_name TEXT NOT NULL DEFAULT '';
CREATE INDEX acme_jobs_dns_name ON acme_jobs (dns_name);
