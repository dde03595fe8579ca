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

// Resources is the resource table, in the order the API documents them.
var Resources = []*Resource{APIKeys, Credentials, BotUsers, IPPolicies, IPPolicyRules}

// Principal id prefixes: users have no collection of their own.
const (
	UserPrefix    = "usr"
	AccountPrefix = "acct"
)

var pathByPrefix = func() map[string]string {
	m := map[string]string{}
	for _, r := range Resources {
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
