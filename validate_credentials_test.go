package edgeplane

import (
	"strings"
	"testing"
)

// The annotations every object has, and the principals' own bodies: API keys, credentials (with
// their ACL grammar) and bot users.

// TestValidateAnnotations: description is at most 255 bytes of UTF-8 on one line, metadata at
// most 4096 bytes of UTF-8 on as many lines as it likes. Every body that embeds the annotations
// checks them; an API key's create and update bodies have no other rule.
func TestValidateAnnotations(t *testing.T) {
	desc := func(s string) *APIKeyCreate {
		return &APIKeyCreate{AnnotationFields: AnnotationFields{Description: &s}}
	}
	meta := func(s string) *APIKeyUpdate { return &APIKeyUpdate{AnnotationFields: AnnotationFields{Metadata: &s}} }
	runCases(t, []vcase{
		pass("empty body", fromJSON[APIKeyCreate](`{}`)),
		pass("null description and metadata", fromJSON[APIKeyCreate](`{"description": null, "metadata": null}`)),
		pass("empty strings clear", fromJSON[APIKeyUpdate](`{"description": "", "metadata": ""}`)),
		pass("owner_id is for Create to check", fromJSON[APIKeyCreate](`{"owner_id": "bot_x", "description": "ci"}`)),
		pass("description of 255 bytes", desc(strings.Repeat("a", MaxDescription))),
		pass("description of 255 bytes of multibyte characters", desc(strings.Repeat("é", 127)+"a")),
		failMsg("description of 256 bytes", desc(strings.Repeat("a", MaxDescription+1)), "description", CodeInvalid, "at most 255 bytes"),
		fail("description of 128 two-byte characters", desc(strings.Repeat("é", 128)), "description", CodeInvalid),
		failMsg("description not UTF-8", desc("caf\xe9"), "description", CodeInvalid, "UTF-8"),
		failMsg("description with a line feed", fromJSON[APIKeyCreate](`{"description": "a\nb"}`), "description", CodeInvalid, "one line"),
		fail("description with a carriage return", fromJSON[APIKeyCreate](`{"description": "a\rb"}`), "description", CodeInvalid),
		fail("description with a tab", fromJSON[APIKeyCreate](`{"description": "a\tb"}`), "description", CodeInvalid),
		pass("metadata of 4096 bytes", meta(strings.Repeat("m", MaxMetadata))),
		pass("metadata on several lines", fromJSON[APIKeyUpdate](`{"metadata": "{\n\t\"a\": 1\r\n}"}`)),
		failMsg("metadata of 4097 bytes", meta(strings.Repeat("m", MaxMetadata+1)), "metadata", CodeInvalid, "at most 4096 bytes"),
		fail("metadata not UTF-8", meta("\xff"), "metadata", CodeInvalid),
		// The annotations are checked by every body embedding them, before its own fields.
		fail("IP policy description", &IPPolicyCreate{AnnotationFields: AnnotationFields{Description: ptr(strings.Repeat("a", 256))}}, "description", CodeInvalid),
		fail("IP policy update metadata", &IPPolicyUpdate{AnnotationFields: AnnotationFields{Metadata: ptr("\xff")}}, "metadata", CodeInvalid),
		fail("annotations before the ACL", fromJSON[CredentialCreate](`{"description": "a\nb", "acl": ["nope"]}`), "description", CodeInvalid),
		fail("reserved address description", fromJSON[ReservedAddrUpdate](`{"description": "a\nb"}`), "description", CodeInvalid),
		fail("certificate update description", fromJSON[TLSCertificateUpdate](`{"description": "a\tb"}`), "description", CodeInvalid),
	})
}

// acl is a credential create body with the rules.
func acl(rules ...string) *CredentialCreate { return &CredentialCreate{ACL: rules} }

// TestValidateCredentialACL walks the ACL grammar rule by rule: "*", and bind rules naming a
// domain, a wildcard domain, an address or a label. A bad rule is 400 ERR_NGROK_600 naming
// acl[i], the first bad one.
func TestValidateCredentialACL(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(label63+".", 3) + strings.Repeat("b", 61) // 3*64 + 61 = 253
	runCases(t, []vcase{
		pass("no acl", fromJSON[CredentialCreate](`{}`)),
		pass("null acl", fromJSON[CredentialCreate](`{"acl": null}`)),
		pass("empty acl", fromJSON[CredentialCreate](`{"acl": []}`)),
		pass("star", acl("*")),
		pass("domain", fromJSON[CredentialCreate](`{"acl": ["bind:example.com"]}`)),
		pass("subdomain", acl("bind:app.eu.example.com")),
		pass("domain in capitals", acl("bind:App.Example.COM")),
		pass("wildcard domain", acl("bind:*.example.com")),
		pass("label of 63 bytes", acl("bind:"+label63+".example.com")),
		pass("domain of 253 bytes", acl("bind:"+name253)),
		pass("address with a hostname", acl("bind:1.tcp.example.com:12345")),
		pass("address port 1", acl("bind:1.tcp.example.com:1")),
		pass("address port 65535", acl("bind:1.tcp.example.com:65535")),
		pass("IPv4 address", acl("bind:192.0.2.1:22")),
		pass("IPv6 address", acl("bind:[2001:db8::1]:8080")),
		pass("label", acl("bind:edge=edghts_2abc")),
		pass("label with dots and dashes", acl("bind:app.kubernetes.io-name=web_1")),
		pass("label any value", acl("bind:edge=*")),
		pass("label any key and value", acl("bind:*=*")),
		pass("several rules", acl("bind:a.example.com", "bind:*.example.org", "bind:k=v", "*")),
		failMsg("other rule kind", acl("connect:example.com"), "acl[0]", CodeBadACLRule, "only rule kind is bind"),
		fail("kind in capitals", acl("BIND:example.com"), "acl[0]", CodeBadACLRule),
		fail("bare domain", acl("example.com"), "acl[0]", CodeBadACLRule),
		fail("empty rule", acl(""), "acl[0]", CodeBadACLRule),
		fail("star with spaces", acl(" *"), "acl[0]", CodeBadACLRule),
		failMsg("bind without target", acl("bind:"), "acl[0]", CodeBadACLRule, "needs a domain"),
		failMsg("bind star", acl("bind:*"), "acl[0]", CodeBadACLRule, "wildcard bind needs a domain suffix"),
		fail("bind star dot", acl("bind:*."), "acl[0]", CodeBadACLRule),
		failMsg("inner wildcard", acl("bind:a.*.example.com"), "acl[0]", CodeBadACLRule, "leading"),
		fail("two wildcards", acl("bind:*.*.example.com"), "acl[0]", CodeBadACLRule),
		fail("wildcard inside a label", acl("bind:*app.example.com"), "acl[0]", CodeBadACLRule),
		fail("wildcard at the end", acl("bind:example.*"), "acl[0]", CodeBadACLRule),
		failMsg("single label", acl("bind:localhost"), "acl[0]", CodeBadACLRule, "not a valid domain name"),
		fail("trailing dot", acl("bind:example.com."), "acl[0]", CodeBadACLRule),
		fail("space in the domain", acl("bind:exa mple.com"), "acl[0]", CodeBadACLRule),
		fail("underscore in the domain", acl("bind:my_app.example.com"), "acl[0]", CodeBadACLRule),
		fail("label starting with a hyphen", acl("bind:-app.example.com"), "acl[0]", CodeBadACLRule),
		fail("label of 64 bytes", acl("bind:"+label63+"a.example.com"), "acl[0]", CodeBadACLRule),
		fail("domain of 254 bytes", acl("bind:a"+name253), "acl[0]", CodeBadACLRule),
		pass("wildcard of 253 bytes", acl("bind:*."+name253[2:])),
		fail("wildcard of 255 bytes", acl("bind:*."+name253), "acl[0]", CodeBadACLRule),
		failMsg("port 0", acl("bind:1.tcp.example.com:0"), "acl[0]", CodeBadACLRule, "from 1 to 65535"),
		fail("port 65536", acl("bind:1.tcp.example.com:65536"), "acl[0]", CodeBadACLRule),
		fail("port with a leading zero", acl("bind:1.tcp.example.com:080"), "acl[0]", CodeBadACLRule),
		fail("port not a number", acl("bind:1.tcp.example.com:http"), "acl[0]", CodeBadACLRule),
		fail("port with a plus sign", acl("bind:1.tcp.example.com:+80"), "acl[0]", CodeBadACLRule),
		fail("IPv6 port with a plus sign", acl("bind:[2001:db8::1]:+80"), "acl[0]", CodeBadACLRule),
		fail("port missing", acl("bind:1.tcp.example.com:"), "acl[0]", CodeBadACLRule),
		fail("host missing", acl("bind::80"), "acl[0]", CodeBadACLRule),
		fail("address host single label", acl("bind:db:5432"), "acl[0]", CodeBadACLRule),
		failMsg("IPv6 without brackets", acl("bind:2001:db8::1:80"), "acl[0]", CodeBadACLRule, "host:port"),
		failMsg("IPv6 without a port", acl("bind:[2001:db8::1]"), "acl[0]", CodeBadACLRule, "[addr]:port"),
		failMsg("IPv6 with a zone", acl("bind:[fe80::1%eth0]:80"), "acl[0]", CodeBadACLRule, "not a hostname or IP address"),
		fail("brackets around garbage", acl("bind:[nope]:80"), "acl[0]", CodeBadACLRule),
		failMsg("label without key", acl("bind:=v"), "acl[0]", CodeBadACLRule, "key=value"),
		fail("label without value", acl("bind:k="), "acl[0]", CodeBadACLRule),
		fail("label value with a space", acl("bind:k=a b"), "acl[0]", CodeBadACLRule),
		fail("label value with an equals sign", acl("bind:k=a=b"), "acl[0]", CodeBadACLRule),
		fail("label key with a slash", acl("bind:app/name=web"), "acl[0]", CodeBadACLRule),
		fail("label key partly wildcard", acl("bind:ed*=web"), "acl[0]", CodeBadACLRule),
		failMsg("first bad rule named", acl("*", "bind:example.com", "bind:", "nope"), "acl[2]", CodeBadACLRule, `"bind:"`),
		// The update body has the same rules.
		pass("update without acl", fromJSON[CredentialUpdate](`{"description": "d"}`)),
		pass("update clearing the acl", fromJSON[CredentialUpdate](`{"acl": []}`)),
		pass("update with rules", fromJSON[CredentialUpdate](`{"acl": ["bind:*.example.com", "bind:k=v"]}`)),
		fail("update with a bad rule", fromJSON[CredentialUpdate](`{"acl": ["bind:*.example.com", "bind:k"]}`), "acl[1]", CodeBadACLRule),
		fail("update annotations before the acl", fromJSON[CredentialUpdate](`{"description": "a\tb", "acl": ["x"]}`), "description", CodeInvalid),
	})
}

// TestValidateBotUsers: a bot user's name is required on create, may not be blanked on update,
// and is at most 255 bytes of UTF-8.
func TestValidateBotUsers(t *testing.T) {
	name := func(s string) *BotUserCreate { return &BotUserCreate{Name: &s} }
	rename := func(s string) *BotUserUpdate { return &BotUserUpdate{Name: &s} }
	runCases(t, []vcase{
		pass("name", fromJSON[BotUserCreate](`{"name": "ci", "active": false}`)),
		pass("name of 255 bytes", name(strings.Repeat("n", MaxDescription))),
		failMsg("no name", fromJSON[BotUserCreate](`{"active": true}`), "name", CodeInvalid, "is required"),
		fail("null name", fromJSON[BotUserCreate](`{"name": null}`), "name", CodeInvalid),
		fail("empty name", name(""), "name", CodeInvalid),
		fail("blank name", name(" \t "), "name", CodeInvalid),
		fail("name of 256 bytes", name(strings.Repeat("n", MaxDescription+1)), "name", CodeInvalid),
		fail("name not UTF-8", name("bot\xc3"), "name", CodeInvalid),
		pass("update of nothing", fromJSON[BotUserUpdate](`{}`)),
		pass("update of active only", fromJSON[BotUserUpdate](`{"active": false}`)),
		pass("rename", rename("deployer")),
		pass("rename to 255 bytes", rename(strings.Repeat("n", MaxDescription))),
		failMsg("rename to empty", rename(""), "name", CodeInvalid, "must not be empty"),
		fail("rename to blank", rename("   "), "name", CodeInvalid),
		fail("rename to 256 bytes", rename(strings.Repeat("n", MaxDescription+1)), "name", CodeInvalid),
	})
}
