package edgeplane

import (
	"strings"
	"testing"
)

// domain is a reserved domain create body for name.
func domain(name string) *ReservedDomainCreate { return &ReservedDomainCreate{Domain: &name} }

// TestValidateReservedDomainNames: a reserved domain is a hostname of at least two labels of 1 to
// 63 letters, digits and inner hyphens, at most 253 bytes in all, optionally under a leading
// "*." wildcard, and not an IP address (a last label of digits). Anything else is 400
// ERR_NGROK_215 naming domain.
func TestValidateReservedDomainNames(t *testing.T) {
	l63 := strings.Repeat("a", 63)
	n253 := strings.Repeat(l63+".", 3) + strings.Repeat("b", 61)
	runCases(t, []vcase{
		pass("domain", fromJSON[ReservedDomainCreate](`{"domain": "example.com"}`)),
		pass("subdomain", domain("app.eu.example.com")),
		pass("two one-letter labels", domain("a.b")),
		pass("capitals", domain("App.Example.COM")),
		pass("hyphens and digits", domain("my-app-2.example.c0m")),
		pass("punycode", domain("xn--bcher-kva.example")),
		pass("wildcard", domain("*.example.com")),
		pass("wildcard of a subdomain", domain("*.apps.example.com")),
		pass("label of 63 bytes", domain(l63+".example.com")),
		pass("253 bytes", domain(n253)),
		pass("wildcard of 253 bytes", domain("*."+n253[2:])),
		failMsg("no domain", fromJSON[ReservedDomainCreate](`{"region": "us"}`), "domain", CodeInvalid, "is required"),
		fail("null domain", fromJSON[ReservedDomainCreate](`{"domain": null}`), "domain", CodeInvalid),
		fail("empty domain", domain(""), "domain", CodeInvalid),
		failMsg("single label", domain("localhost"), "domain", CodeInvalid, "at least two labels"),
		fail("trailing dot", domain("example.com."), "domain", CodeInvalid),
		fail("leading dot", domain(".example.com"), "domain", CodeInvalid),
		fail("empty label", domain("app..example.com"), "domain", CodeInvalid),
		fail("space", domain("exa mple.com"), "domain", CodeInvalid),
		fail("underscore", domain("my_app.example.com"), "domain", CodeInvalid),
		fail("leading hyphen", domain("-app.example.com"), "domain", CodeInvalid),
		fail("trailing hyphen", domain("app-.example.com"), "domain", CodeInvalid),
		fail("not ASCII", domain("bücher.example"), "domain", CodeInvalid),
		fail("label of 64 bytes", domain(l63+"a.example.com"), "domain", CodeInvalid),
		fail("254 bytes", domain("a"+n253), "domain", CodeInvalid),
		fail("wildcard of a top-level domain", domain("*.com"), "domain", CodeInvalid),
		fail("bare star", domain("*"), "domain", CodeInvalid),
		fail("star dot", domain("*."), "domain", CodeInvalid),
		fail("two wildcards", domain("*.*.example.com"), "domain", CodeInvalid),
		fail("inner wildcard", domain("app.*.example.com"), "domain", CodeInvalid),
		fail("partial wildcard", domain("app*.example.com"), "domain", CodeInvalid),
		failMsg("IPv4 address", domain("192.0.2.1"), "domain", CodeInvalid, "all digits"),
		fail("all-digit last label", domain("example.123"), "domain", CodeInvalid),
		fail("wildcard over an address", domain("*.10.0.0.1"), "domain", CodeInvalid),
		fail("IPv6 address", domain("2001:db8::1"), "domain", CodeInvalid),
		fail("URL", domain("https://example.com"), "domain", CodeInvalid),
		fail("with a port", domain("example.com:443"), "domain", CodeInvalid),
		// A DNS name is at most 253 bytes written out, its "*" label included: a wildcard over a
		// 253-byte name is 255 bytes, which no resolver, certificate or ACME order accepts.
		fail("wildcard of 255 bytes", domain("*."+n253), "domain", CodeInvalid),
		fail("wildcard of 254 bytes", domain("*."+n253[1:]), "domain", CodeInvalid),
	})
}

// TestValidateReservedDomainCanonical: Validate lowercases the name it accepts.
func TestValidateReservedDomainCanonical(t *testing.T) {
	for in, want := range map[string]string{"App.Example.COM": "app.example.com", "*.EXAMPLE.com": "*.example.com"} {
		c := domain(in)
		if err := c.Validate(); err != nil || *c.Domain != want {
			t.Errorf("%q: domain %q, %v; want %q", in, *c.Domain, err, want)
		}
	}
}

// TestValidateReservedDomainOptions: the deprecated region is one of the spec's values; a
// certificate management policy names letsencrypt and rsa or ecdsa (empty fields take those
// defaults, and an empty policy is none); an uploaded certificate and a policy together are 400
// ERR_NGROK_434; and an update may not name an endpoint configuration, which edgeplane does not
// offer.
func TestValidateReservedDomainOptions(t *testing.T) {
	const (
		authority = "certificate_management_policy.authority"
		keyType   = "certificate_management_policy.private_key_type"
	)
	create := fromJSON[ReservedDomainCreate]
	update := fromJSON[ReservedDomainUpdate]
	runCases(t, []vcase{
		pass("no region", create(`{"domain": "example.com", "region": null}`)),
		pass("empty region", create(`{"domain": "example.com", "region": ""}`)),
		pass("region us", create(`{"domain": "example.com", "region": "us"}`)),
		pass("region sa", create(`{"domain": "example.com", "region": "sa"}`)),
		failMsg("unknown region", create(`{"domain": "example.com", "region": "mars"}`), "region", CodeInvalid, "au, eu, ap, us, jp, in, sa"),
		fail("region in capitals", create(`{"domain": "example.com", "region": "EU"}`), "region", CodeInvalid),
		fail("domain checked before region", create(`{"domain": "nope", "region": "mars"}`), "domain", CodeInvalid),
		pass("empty policy", create(`{"domain": "example.com", "certificate_management_policy": {}}`)),
		pass("policy of empty strings", create(`{"domain": "example.com", "certificate_management_policy": {"authority": "", "private_key_type": ""}}`)),
		pass("policy with authority", create(`{"domain": "example.com", "certificate_management_policy": {"authority": "letsencrypt"}}`)),
		pass("policy with rsa", create(`{"domain": "example.com", "certificate_management_policy": {"private_key_type": "rsa"}}`)),
		pass("policy with ecdsa", create(`{"domain": "*.example.com", "certificate_management_policy": {"authority": "letsencrypt", "private_key_type": "ecdsa"}}`)),
		failMsg("other authority", create(`{"domain": "example.com", "certificate_management_policy": {"authority": "zerossl"}}`), authority, CodeInvalid, `"letsencrypt"`),
		fail("authority in capitals", create(`{"domain": "example.com", "certificate_management_policy": {"authority": "LetsEncrypt"}}`), authority, CodeInvalid),
		failMsg("ed25519 key", create(`{"domain": "example.com", "certificate_management_policy": {"private_key_type": "ed25519"}}`), keyType, CodeInvalid, `"rsa" or "ecdsa"`),
		fail("key type in capitals", create(`{"domain": "example.com", "certificate_management_policy": {"private_key_type": "RSA"}}`), keyType, CodeInvalid),
		pass("certificate", create(`{"domain": "example.com", "certificate_id": "cert_x"}`)),
		pass("certificate and an empty policy", create(`{"domain": "example.com", "certificate_id": "cert_x", "certificate_management_policy": {}}`)),
		pass("empty certificate and a policy", create(`{"domain": "example.com", "certificate_id": "", "certificate_management_policy": {"private_key_type": "ecdsa"}}`)),
		failMsg("certificate and a policy", create(`{"domain": "example.com", "certificate_id": "cert_x", "certificate_management_policy": {"authority": "letsencrypt"}}`), "certificate_id", CodeCertAndPolicy, "mutually exclusive"),
		fail("policy checked before the pair", create(`{"domain": "example.com", "certificate_id": "cert_x", "certificate_management_policy": {"authority": "x"}}`), authority, CodeInvalid),
		pass("update of nothing", update(`{}`)),
		pass("update attaching a certificate", update(`{"certificate_id": "cert_x"}`)),
		pass("update detaching the certificate", update(`{"certificate_id": ""}`)),
		pass("update turning management off", update(`{"certificate_management_policy": {}}`)),
		pass("update turning management on", update(`{"certificate_management_policy": {"private_key_type": "ecdsa"}}`)),
		pass("update clearing endpoint configurations", update(`{"http_endpoint_configuration_id": "", "https_endpoint_configuration_id": null}`)),
		failMsg("update naming an http endpoint configuration", update(`{"http_endpoint_configuration_id": "ec_x"}`), "http_endpoint_configuration_id", CodeInvalid, `"ec_x"`),
		fail("update naming an https endpoint configuration", update(`{"https_endpoint_configuration_id": "ec_x"}`), "https_endpoint_configuration_id", CodeInvalid),
		fail("update with another authority", update(`{"certificate_management_policy": {"authority": "buypass"}}`), authority, CodeInvalid),
		fail("update with another key type", update(`{"certificate_management_policy": {"private_key_type": "dsa"}}`), keyType, CodeInvalid),
		fail("update with both", update(`{"certificate_id": "cert_x", "certificate_management_policy": {"private_key_type": "rsa"}}`), "certificate_id", CodeCertAndPolicy),
		fail("update annotations first", update(`{"description": "a\nb", "http_endpoint_configuration_id": "ec_x"}`), "description", CodeInvalid),
	})
}

// TestValidateReservedAddrs: a reserved address body has only the annotations and the
// deprecated region.
func TestValidateReservedAddrs(t *testing.T) {
	runCases(t, []vcase{
		pass("empty body", fromJSON[ReservedAddrCreate](`{}`)),
		pass("region", fromJSON[ReservedAddrCreate](`{"region": "jp", "description": "db"}`)),
		pass("empty region", fromJSON[ReservedAddrCreate](`{"region": ""}`)),
		failMsg("unknown region", fromJSON[ReservedAddrCreate](`{"region": "us-east-1"}`), "region", CodeInvalid, `got "us-east-1"`),
		fail("annotations first", fromJSON[ReservedAddrCreate](`{"metadata": "`+strings.Repeat("m", MaxMetadata+1)+`", "region": "x"}`), "metadata", CodeInvalid),
		pass("update", fromJSON[ReservedAddrUpdate](`{"metadata": "m"}`)),
	})
}
