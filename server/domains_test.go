package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// reservedDomainKeys are the fields every reserved domain response has (schema "ReservedDomain"
// plus the endpoint configurations of the spec).
var reservedDomainKeys = []string{"id", "uri", "created_at", "description", "metadata", "domain", "region", "cname_target",
	"http_endpoint_configuration", "https_endpoint_configuration", "certificate", "certificate_management_policy",
	"certificate_management_status", "acme_challenge_cname_target"}

func wantKeys(t *testing.T, r resp, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := r.body[k]; !ok {
			t.Fatalf("response has no %q: %s", k, r.raw)
		}
	}
	if len(r.body) != len(keys) {
		t.Fatalf("response has %d fields, want exactly %v: %s", len(r.body), keys, r.raw)
	}
}

func wantField(t *testing.T, r resp, field string) {
	t.Helper()
	if got, _ := r.body["details"].(map[string]any)["field"].(string); got != field {
		t.Fatalf("details.field %q, want %q: %s", got, field, r.raw)
	}
}

var (
	cnameTarget = regexp.MustCompile(`^[a-z2-7]{16}\.cname\.edgeplane\.app$`)
	acmeTarget  = regexp.MustCompile(`^[a-z2-7]{16}\.acme\.cname\.edgeplane\.app$`)
)

// TestReservedDomainFields covers every derived field: the lowercased name, the CNAME target of
// custom domains (stable across reads), the ACME challenge target of wildcard custom domains, null
// targets under the service domain, region, and the null certificate fields.
func TestReservedDomainFields(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token

	custom := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "App.Example.COM"}).must(t, 201)
	wantKeys(t, custom, reservedDomainKeys)
	if custom.str("domain") != "app.example.com" || custom.body["region"] != "" || custom.body["description"] != "" || custom.body["metadata"] != "" {
		t.Fatalf("custom domain: %s", custom.raw)
	}
	if !cnameTarget.MatchString(custom.str("cname_target")) {
		t.Fatalf("cname_target %q is not a generated name in the CNAME zone", custom.body["cname_target"])
	}
	for _, k := range []string{"acme_challenge_cname_target", "certificate", "certificate_management_policy",
		"certificate_management_status", "http_endpoint_configuration", "https_endpoint_configuration"} {
		if custom.body[k] != nil {
			t.Fatalf("%s should be null: %s", k, custom.raw)
		}
	}
	id := custom.str("id")
	if got := e.do(tok, "GET", "/reserved_domains/"+id, nil).must(t, 200); got.str("cname_target") != custom.str("cname_target") {
		t.Fatalf("cname_target changed between reads: %s then %s", custom.str("cname_target"), got.str("cname_target"))
	}
	patched := e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"description": "d"}).must(t, 200)
	if patched.str("cname_target") != custom.str("cname_target") || patched.str("domain") != "app.example.com" {
		t.Fatalf("PATCH changed derived fields: %s", patched.raw)
	}

	wild := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "*.corp.example.com", "region": "us"}).must(t, 201)
	if wild.str("region") != "us" || !cnameTarget.MatchString(wild.str("cname_target")) || !acmeTarget.MatchString(wild.str("acme_challenge_cname_target")) {
		t.Fatalf("wildcard custom domain: %s", wild.raw)
	}
	if wild.str("cname_target") == custom.str("cname_target") {
		t.Fatalf("two domains share the CNAME target %s", wild.str("cname_target"))
	}

	for _, name := range []string{"myapp.edgeplane.app", "*.team.edgeplane.app", "a.b.edgeplane.app"} {
		svc := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": name}).must(t, 201)
		if svc.body["cname_target"] != nil || svc.body["acme_challenge_cname_target"] != nil {
			t.Fatalf("%s is under the service domain and needs no CNAME: %s", name, svc.raw)
		}
	}

	for _, region := range ep.DomainRegions {
		r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "r-" + region + ".example.com", "region": region}).must(t, 201)
		if r.str("region") != region {
			t.Fatalf("region %s stored as %s", region, r.raw)
		}
	}
	if r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "noregion.example.com", "region": ""}).must(t, 201); r.body["region"] != "" {
		t.Fatalf(`region "" should be "": %s`, r.raw)
	}
	list := e.do(tok, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains")
	for _, item := range list {
		if item["id"] == id && item["cname_target"] != custom.str("cname_target") {
			t.Fatalf("list shows another cname_target: %v", item)
		}
	}
}

// TestReservedDomainSettings: the service domains and the CNAME zone come from the settings.
func TestReservedDomainSettings(t *testing.T) {
	e := newEnv(t)
	e.st.SetSettings(ep.Settings{ServiceDomains: []string{"example.net", "corp.test"}, CNAMEZone: "targets.example.org"})
	tok := e.admin.token
	for _, name := range []string{"a.example.net", "b.corp.test", "*.x.corp.test"} {
		if r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": name}).must(t, 201); r.body["cname_target"] != nil {
			t.Fatalf("%s is under a configured service domain: %s", name, r.raw)
		}
	}
	r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "*.app.edgeplane.app"}).must(t, 201)
	if !regexp.MustCompile(`^[a-z2-7]{16}\.targets\.example\.org$`).MatchString(r.str("cname_target")) ||
		!regexp.MustCompile(`^[a-z2-7]{16}\.acme\.targets\.example\.org$`).MatchString(r.str("acme_challenge_cname_target")) {
		t.Fatalf("edgeplane.app is no longer a service domain, so it needs targets in the configured zone: %s", r.raw)
	}
	e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "example.net"}).wantError(t, 400, ep.CodeInvalid)
	e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "x.targets.example.org"}).wantError(t, 400, ep.CodeInvalid)
}

// TestReservedDomainRejections: every invalid create and update, with its status and code.
func TestReservedDomainRejections(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	wantField(t, e.do(tok, "POST", "/reserved_domains", map[string]any{}).wantError(t, 400, ep.CodeInvalid), "domain")
	badNames := []string{
		"", "localhost", "exa mple.com", "-a.example.com", "a-.example.com", "a..example.com", ".example.com", "example.com.",
		strings.Repeat("a", 64) + ".com", strings.Repeat(strings.Repeat("a", 63)+".", 4) + "com", "*", "*.com", "a.*.example.com",
		"*example.com", "**.example.com", "10.0.0.1", "example.123", "ex_ample.com", "é.example.com", "[::1]", "example.com:80",
	}
	for _, name := range badNames {
		r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": name}).wantError(t, 400, ep.CodeInvalid)
		wantField(t, r, "domain")
		if !strings.HasPrefix(r.msg(), "domain") {
			t.Fatalf("message should name domain: %s", r.msg())
		}
	}
	e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": 42}).wantError(t, 400, ep.CodeInvalid)
	for _, region := range []string{"US", "moon", "eu-west-1"} {
		wantField(t, e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "r.example.com", "region": region}).wantError(t, 400, ep.CodeInvalid), "region")
	}
	// The service's own base domain and the CNAME zone cannot be reserved.
	for _, name := range []string{"edgeplane.app", "EDGEPLANE.APP", "*.edgeplane.app", "cname.edgeplane.app", "x.cname.edgeplane.app", "*.cname.edgeplane.app"} {
		wantField(t, e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": name}).wantError(t, 400, ep.CodeInvalid), "domain")
	}
	if n := len(e.do(tok, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains")); n != 0 {
		t.Fatalf("rejected creates created %d domains", n)
	}

	id := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "fixed.example.com"}).must(t, 201).str("id")
	e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"domain": "other.example.com"}).wantError(t, 400, ep.CodeUnknownField)
	e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"region": "eu"}).wantError(t, 400, ep.CodeUnknownField)
	for _, field := range []string{"http_endpoint_configuration_id", "https_endpoint_configuration_id"} {
		r := e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{field: "ec_2NTVGfG1p0WdWgtOQIa8Jz1hnY5"}).wantError(t, 400, ep.CodeInvalid)
		wantField(t, r, field)
		if !strings.HasPrefix(r.msg(), field) || !strings.Contains(r.msg(), "no endpoint configuration") {
			t.Fatalf("message should name %s and say it is not found: %s", field, r.msg())
		}
		ok := e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{field: ""}).must(t, 200)
		if ok.body[strings.TrimSuffix(field, "_id")] != nil {
			t.Fatalf("%s cleared should stay null: %s", field, ok.raw)
		}
	}
	e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"http_endpoint_configuration_id": nil}).must(t, 200)
}

// TestReservedDomainUniqueness: a name is reserved once across all accounts; 413 in the same
// account, 414 in another; case does not matter; deleting frees the name.
func TestReservedDomainUniqueness(t *testing.T) {
	e := newEnv(t)
	a, b := e.admin, e.newAccount("b")
	id := e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "shop.example.com"}).must(t, 201).str("id")
	r := e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "shop.example.com"}).wantError(t, 409, ep.CodeDomainReserved)
	wantField(t, r, "domain")
	e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "SHOP.Example.com"}).wantError(t, 409, ep.CodeDomainReserved)
	r = e.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": "Shop.example.com"}).wantError(t, 409, ep.CodeDomainReservedElsewhere)
	if !strings.Contains(r.msg(), `"shop.example.com"`) {
		t.Fatalf("message should quote the name: %s", r.msg())
	}
	// A wildcard is a different name.
	e.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": "*.shop.example.com"}).must(t, 201)
	if n := len(e.do(b.token, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains")); n != 1 {
		t.Fatalf("account b has %d domains, want 1", n)
	}
	e.do(a.token, "DELETE", "/reserved_domains/"+id, nil).must(t, 204)
	e.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": "shop.example.com"}).must(t, 201)
	e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "shop.example.com"}).wantError(t, 409, ep.CodeDomainReservedElsewhere)
}

// TestReservedDomainRace: 20 concurrent creates of one name from two accounts; exactly one wins,
// every other gets 409 with the code of its account's relation to the winner.
func TestReservedDomainRace(t *testing.T) {
	e := newEnv(t)
	accounts := []account{e.admin, e.newAccount("racer")}
	for round := range 3 {
		name := fmt.Sprintf("race-%d.example.com", round)
		type result struct {
			account int
			status  int
			code    string
		}
		results := make([]result, 20)
		concurrently(len(results), func(i int) {
			status, body, err := rawPost(e.srv.URL+"/reserved_domains", accounts[i%2].token, map[string]any{"domain": name})
			results[i] = result{account: i % 2, status: status}
			if err != nil {
				results[i].code = err.Error()
				return
			}
			results[i].code, _ = body["error_code"].(string)
		})
		winner := -1
		for _, r := range results {
			if r.status == 201 {
				if winner >= 0 {
					t.Fatalf("round %d: two creates of %s succeeded: %+v", round, name, results)
				}
				winner = r.account
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no create succeeded: %+v", round, results)
		}
		for _, r := range results {
			if r.status == 201 {
				continue
			}
			want := "ERR_NGROK_414"
			if r.account == winner {
				want = "ERR_NGROK_413"
			}
			if r.status != 409 || r.code != want {
				t.Fatalf("round %d: a losing create got %d %s, want 409 %s: %+v", round, r.status, r.code, want, results)
			}
		}
		total := 0
		for _, a := range accounts {
			for _, item := range e.do(a.token, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains") {
				if item["domain"] == name {
					total++
				}
			}
		}
		if total != 1 {
			t.Fatalf("round %d: %d domains named %s exist", round, total, name)
		}
	}
}

// rawPost sends an authenticated POST without touching testing.T, for use from goroutines.
func rawPost(url, token string, body any) (int, map[string]any, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest("POST", url, bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	err = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out, err
}

// TestReservedDomainCertificate covers certificate_id and certificate_management_policy: the
// Ref, lookups confined to the account, mutual exclusion (434), the policy defaults and status,
// clearing each, switching from one to the other, and the delete restriction on the certificate.
func TestReservedDomainCertificate(t *testing.T) {
	e := newEnv(t)
	tok := e.admin.token
	p := testPKI(t)
	certBody := map[string]any{"certificate_pem": p.leafECDSA.pem, "private_key_pem": p.leafECDSA.keyPEM}
	cert := e.do(tok, "POST", "/tls_certificates", certBody).must(t, 201).str("id")

	d := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "tls.example.com", "certificate_id": cert}).must(t, 201)
	ref, _ := d.body["certificate"].(map[string]any)
	if ref["id"] != cert || ref["uri"] != e.base+"/tls_certificates/"+cert || d.body["certificate_management_policy"] != nil || d.body["certificate_management_status"] != nil {
		t.Fatalf("domain with an uploaded certificate: %s", d.raw)
	}
	id := d.str("id")

	// The certificate cannot be deleted while the domain uses it.
	r := e.do(tok, "DELETE", "/tls_certificates/"+cert, nil).wantError(t, 409, ep.CodeCertificateInUse)
	if !strings.Contains(r.msg(), cert) {
		t.Fatalf("message should name the certificate: %s", r.msg())
	}

	// Lookups: missing, another account's, the wrong kind.
	other := e.newAccount("other")
	otherCert := e.do(other.token, "POST", "/tls_certificates", certBody).must(t, 201).str("id")
	missing, _ := ep.NewID("cert")
	ipp := e.do(tok, "POST", "/ip_policies", nil).must(t, 201).str("id")
	for _, bad := range []string{missing, otherCert, ipp, "nope"} {
		r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "x.example.com", "certificate_id": bad}).wantError(t, 400, ep.CodeInvalid)
		wantField(t, r, "certificate_id")
		e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"certificate_id": bad}).wantError(t, 400, ep.CodeInvalid)
	}

	// certificate_id and a policy together: 434, on create and update.
	policy := map[string]any{"authority": "letsencrypt", "private_key_type": "ecdsa"}
	e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "both.example.com", "certificate_id": cert, "certificate_management_policy": policy}).
		wantError(t, 400, ep.CodeCertAndPolicy)
	e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"certificate_id": cert, "certificate_management_policy": policy}).
		wantError(t, 400, ep.CodeCertAndPolicy)
	// An empty policy is no policy, so it may accompany a certificate.
	e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "both.example.com", "certificate_id": cert, "certificate_management_policy": map[string]any{}}).must(t, 201)

	// Clearing the certificate releases it.
	cleared := e.do(tok, "PATCH", "/reserved_domains/"+id, map[string]any{"certificate_id": ""}).must(t, 200)
	if cleared.body["certificate"] != nil {
		t.Fatalf(`certificate_id "" should detach the certificate: %s`, cleared.raw)
	}

	// Policies: defaults, status, the same policy again, a changed policy, clearing.
	m := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "managed.example.com", "certificate_management_policy": map[string]any{"authority": "letsencrypt"}}).must(t, 201)
	if got := m.body["certificate_management_policy"]; !equalJSON(got, map[string]any{"authority": "letsencrypt", "private_key_type": "rsa"}) {
		t.Fatalf("policy defaults: %v", got)
	}
	status := checkPendingStatus(t, m)
	if status["provisioning_job"].(map[string]any)["started_at"] != m.str("created_at") {
		t.Fatalf("the job starts when the policy is set: %s", m.raw)
	}
	mid := m.str("id")
	if got := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "managed2.example.com", "certificate_management_policy": map[string]any{"private_key_type": "ecdsa"}}).
		must(t, 201).body["certificate_management_policy"]; !equalJSON(got, policy) {
		t.Fatalf("authority should default to letsencrypt: %v", got)
	}
	same := e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": map[string]any{"authority": "letsencrypt", "private_key_type": "rsa"}}).must(t, 200)
	if !equalJSON(same.body["certificate_management_status"], m.body["certificate_management_status"]) {
		t.Fatalf("the same policy again must not restart provisioning: %s", same.raw)
	}
	e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": nil}).must(t, 200)
	changed := e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": policy}).must(t, 200)
	if !equalJSON(changed.body["certificate_management_policy"], policy) {
		t.Fatalf("changed policy: %s", changed.raw)
	}
	checkPendingStatus(t, changed)
	off := e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": map[string]any{}}).must(t, 200)
	if off.body["certificate_management_policy"] != nil || off.body["certificate_management_status"] != nil {
		t.Fatalf("{} should turn management off: %s", off.raw)
	}

	// Setting one turns the other off, and the certificate reference follows.
	withCert := e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": policy}).must(t, 200)
	checkPendingStatus(t, withCert)
	withCert = e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_id": cert}).must(t, 200)
	if withCert.body["certificate_management_policy"] != nil || withCert.body["certificate_management_status"] != nil || withCert.body["certificate"] == nil {
		t.Fatalf("an uploaded certificate replaces the policy: %s", withCert.raw)
	}
	e.do(tok, "DELETE", "/tls_certificates/"+cert, nil).wantError(t, 409, ep.CodeCertificateInUse)
	managed := e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": policy}).must(t, 200)
	if managed.body["certificate"] != nil {
		t.Fatalf("a policy replaces the uploaded certificate: %s", managed.raw)
	}
	// "both.example.com" still uses the certificate; once it is gone, the certificate can go.
	for _, item := range e.do(tok, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains") {
		if item["domain"] == "both.example.com" {
			e.do(tok, "DELETE", "/reserved_domains/"+item["id"].(string), nil).must(t, 204)
		}
	}
	e.do(tok, "DELETE", "/tls_certificates/"+cert, nil).must(t, 204)

	// Invalid policies.
	for _, c := range []struct {
		policy any
		status int
		code   int
		field  string
	}{
		{map[string]any{"authority": "zerossl"}, 400, ep.CodeInvalid, "certificate_management_policy.authority"},
		{map[string]any{"authority": "LetsEncrypt"}, 400, ep.CodeInvalid, "certificate_management_policy.authority"},
		{map[string]any{"authority": "letsencrypt", "private_key_type": "ed25519"}, 400, ep.CodeInvalid, "certificate_management_policy.private_key_type"},
		{map[string]any{"private_key_type": "RSA"}, 400, ep.CodeInvalid, "certificate_management_policy.private_key_type"},
		{map[string]any{"authority": "letsencrypt", "renew": true}, 400, ep.CodeUnknownField, "renew"},
		{"letsencrypt", 400, ep.CodeInvalid, "certificate_management_policy"},
	} {
		r := e.do(tok, "POST", "/reserved_domains", map[string]any{"domain": "p.example.com", "certificate_management_policy": c.policy}).wantError(t, c.status, c.code)
		wantField(t, r, c.field)
		e.do(tok, "PATCH", "/reserved_domains/"+mid, map[string]any{"certificate_management_policy": c.policy}).wantError(t, c.status, c.code)
	}
}

// checkPendingStatus asserts the status of a managed certificate that edgeplane cannot provision
// yet: no renewal date, and a job that says provisioning is pending, without an error code.
func checkPendingStatus(t *testing.T, r resp) map[string]any {
	t.Helper()
	status, ok := r.body["certificate_management_status"].(map[string]any)
	if !ok {
		t.Fatalf("no certificate_management_status: %s", r.raw)
	}
	job, ok := status["provisioning_job"].(map[string]any)
	if !ok || status["renews_at"] != nil || len(status) != 2 {
		t.Fatalf("status: %v", status)
	}
	msg, _ := job["msg"].(string)
	started, _ := job["started_at"].(string)
	if _, err := time.Parse(time.RFC3339, started); err != nil || !strings.Contains(msg, "pending") ||
		job["error_code"] != nil || job["retries_at"] != nil || len(job) != 4 {
		t.Fatalf("provisioning job: %v", job)
	}
	return status
}

// edgeStub stands in for an edge (a later issue) whose hostports use a reserved domain: a document
// that references the domain with RefRestrict, written through the store as edges will be.
var edgeStub = &ep.Resource{Kind: "test_edge_stub", Path: "/test_edge_stubs", ListKey: "stubs", Prefix: "stub",
	New: func() ep.Document { return new(edgeStubDoc) }}

type edgeStubDoc struct {
	ep.Meta
	DomainID string `json:"domain_id"`
}

func (d *edgeStubDoc) References() []ep.Reference {
	return []ep.Reference{{To: d.DomainID, Mode: ep.RefRestrict}}
}

type edgeStubCreate struct{ domainID string }

func (c *edgeStubCreate) Validate() error { return nil }
func (c *edgeStubCreate) Create(op *ep.Op) (ep.Document, error) {
	return &edgeStubDoc{DomainID: c.domainID}, nil
}

// TestReservedDomainInUse: a domain that an edge uses cannot be deleted (409 ERR_NGROK_446).
func TestReservedDomainInUse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := e.do(e.admin.token, "POST", "/reserved_domains", map[string]any{"domain": "edge.example.com"}).must(t, 201).str("id")
	stub, err := e.st.Create(ctx, e.admin.caller, edgeStub, "", &edgeStubCreate{domainID: id})
	if err != nil {
		t.Fatal(err)
	}
	r := e.do(e.admin.token, "DELETE", "/reserved_domains/"+id, nil).wantError(t, 409, ep.CodeDomainInUse)
	if !strings.Contains(r.msg(), id) {
		t.Fatalf("message should name the domain: %s", r.msg())
	}
	e.do(e.admin.token, "GET", "/reserved_domains/"+id, nil).must(t, 200)
	if err := e.st.Delete(ctx, e.admin.caller, edgeStub, "", stub.Base().ID); err != nil {
		t.Fatal(err)
	}
	e.do(e.admin.token, "DELETE", "/reserved_domains/"+id, nil).must(t, 204)
}
