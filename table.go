package edgeplane

import "strings"

// The resource table. Each entry declares a collection; the store and the HTTP layer serve every
// entry with the same generic code, and the tests walk this list so a new entry gets its
// lifecycle tests for free.

// APIKeys is /api_keys.
var APIKeys = &Resource{
	Kind: "api_key", Path: "/api_keys", ListKey: "keys", Prefix: "ak", Ops: AllOps,
	New:       func() Document { return new(APIKey) },
	NewCreate: func() Creator { return new(APIKeyCreate) },
	NewUpdate: func() Updater { return new(APIKeyUpdate) },
}

// Credentials is /credentials.
var Credentials = &Resource{
	Kind: "credential", Path: "/credentials", ListKey: "credentials", Prefix: "cr", Ops: AllOps,
	New:       func() Document { return new(Credential) },
	NewCreate: func() Creator { return new(CredentialCreate) },
	NewUpdate: func() Updater { return new(CredentialUpdate) },
}

// BotUsers is /bot_users.
var BotUsers = &Resource{
	Kind: "bot_user", Path: "/bot_users", ListKey: "bot_users", Prefix: "bot", Ops: AllOps,
	New:       func() Document { return new(BotUser) },
	NewCreate: func() Creator { return new(BotUserCreate) },
	NewUpdate: func() Updater { return new(BotUserUpdate) },
	OnDelete:  deleteBotPrincipal,
}

// IPPolicies is /ip_policies.
var IPPolicies = &Resource{
	Kind: "ip_policy", Path: "/ip_policies", ListKey: "ip_policies", Prefix: "ipp", Ops: AllOps,
	New:       func() Document { return new(IPPolicy) },
	NewCreate: func() Creator { return new(IPPolicyCreate) },
	NewUpdate: func() Updater { return new(IPPolicyUpdate) },
}

// IPPolicyRules is /ip_policy_rules.
var IPPolicyRules = &Resource{
	Kind: "ip_policy_rule", Path: "/ip_policy_rules", ListKey: "ip_policy_rules", Prefix: "ipr", Ops: AllOps,
	New:       func() Document { return new(IPPolicyRule) },
	NewCreate: func() Creator { return new(IPPolicyRuleCreate) },
	NewUpdate: func() Updater { return new(IPPolicyRuleUpdate) },
}

// ReservedDomains is /reserved_domains. Names are unique across accounts (claims); a domain
// that an edge's hostports use cannot be deleted.
var ReservedDomains = &Resource{
	Kind: "reserved_domain", Path: "/reserved_domains", ListKey: "reserved_domains", Prefix: "rd", Ops: AllOps,
	New:       func() Document { return new(ReservedDomain) },
	NewCreate: func() Creator { return new(ReservedDomainCreate) },
	NewUpdate: func() Updater { return new(ReservedDomainUpdate) },
	InUse:     domainInUse,
}

// TLSCertificates is /tls_certificates. A certificate attached to a reserved domain cannot be
// deleted.
var TLSCertificates = &Resource{
	Kind: "tls_certificate", Path: "/tls_certificates", ListKey: "tls_certificates", Prefix: "cert", Ops: AllOps,
	New:       func() Document { return new(TLSCertificate) },
	NewCreate: func() Creator { return new(TLSCertificateCreate) },
	NewUpdate: func() Updater { return new(TLSCertificateUpdate) },
	InUse:     certificateInUse,
}

// CertificateAuthorities is /certificate_authorities.
var CertificateAuthorities = &Resource{
	Kind: "certificate_authority", Path: "/certificate_authorities", ListKey: "certificate_authorities", Prefix: "ca", Ops: AllOps,
	New:       func() Document { return new(CertificateAuthority) },
	NewCreate: func() Creator { return new(CertificateAuthorityCreate) },
	NewUpdate: func() Updater { return new(CertificateAuthorityUpdate) },
}

// SSHCertificateAuthorities is /ssh_certificate_authorities. A CA that still has certificates
// cannot be deleted.
var SSHCertificateAuthorities = &Resource{
	Kind: "ssh_certificate_authority", Path: "/ssh_certificate_authorities", ListKey: "ssh_certificate_authorities", Prefix: "sshca", Ops: AllOps,
	New:       func() Document { return new(SSHCertificateAuthority) },
	NewCreate: func() Creator { return new(SSHCertificateAuthorityCreate) },
	NewUpdate: func() Updater { return new(SSHCertificateAuthorityUpdate) },
	InUse:     sshCAInUse,
}

// SSHUserCertificates is /ssh_user_certificates.
var SSHUserCertificates = &Resource{
	Kind: "ssh_user_certificate", Path: "/ssh_user_certificates", ListKey: "ssh_user_certificates", Prefix: "sucrt", Ops: AllOps,
	New:       func() Document { return new(SSHUserCertificate) },
	NewCreate: func() Creator { return new(SSHUserCertificateCreate) },
	NewUpdate: func() Updater { return new(SSHUserCertificateUpdate) },
}

// SSHHostCertificates is /ssh_host_certificates.
var SSHHostCertificates = &Resource{
	Kind: "ssh_host_certificate", Path: "/ssh_host_certificates", ListKey: "ssh_host_certificates", Prefix: "shcrt", Ops: AllOps,
	New:       func() Document { return new(SSHHostCertificate) },
	NewCreate: func() Creator { return new(SSHHostCertificateCreate) },
	NewUpdate: func() Updater { return new(SSHHostCertificateUpdate) },
}

// Resources is the resource table, in the order the API documents them.
var Resources = []*Resource{APIKeys, Credentials, BotUsers, IPPolicies, IPPolicyRules,
	ReservedDomains, TLSCertificates, CertificateAuthorities, SSHCertificateAuthorities, SSHUserCertificates, SSHHostCertificates,
	ReservedAddrs, TunnelGroupBackends, StaticBackends, HTTPResponseBackends, FailoverBackends, WeightedBackends,
	TLSEdges, HTTPSEdges, HTTPSEdgeRoutes, TCPEdges}

// Principal id prefixes: users have no collection of their own.
const (
	UserPrefix    = "usr"
	AccountPrefix = "acct"
)

var pathByPrefix = func() map[string]string {
	m := map[string]string{}
	for _, r := range append(Resources, LiveResources...) {
		if r.Parent == nil {
			m[r.Prefix] = r.Path
		}
	}
	return m
}()

// PathOf returns the path of a top-level object from its id's prefix, for the uri of a Ref; ""
// when the prefix names no top-level collection.
func PathOf(id string) string {
	prefix, _, ok := strings.Cut(id, "_")
	if !ok {
		return ""
	}
	if p, ok := pathByPrefix[prefix]; ok {
		return p + "/" + id
	}
	return ""
}
