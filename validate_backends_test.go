package edgeplane

import (
	"fmt"
	"strings"
	"testing"
)

// The five backend collections' bodies. Whether the backends a failover or weighted backend
// names exist, and whether they form a cycle, needs the store and is Apply's rule.

// TestValidateTunnelGroupBackends: at most 32 labels, keys and values of letters, digits, '.',
// '_' and '-' (no "*": a backend matches concrete labels).
func TestValidateTunnelGroupBackends(t *testing.T) {
	labels := func(k, v string) *TunnelGroupBackendBody {
		return &TunnelGroupBackendBody{Labels: map[string]string{"edge": "web", k: v}}
	}
	runCases(t, []vcase{
		pass("empty body", fromJSON[TunnelGroupBackendBody](`{}`)),
		pass("labels", fromJSON[TunnelGroupBackendBody](`{"labels": {"env": "prod", "tier": "web-1", "app.name_2": "A.b_C-3"}}`)),
		pass("no labels", fromJSON[TunnelGroupBackendBody](`{"labels": {}}`)),
		pass("32 labels", &TunnelGroupBackendBody{Labels: kv(MaxBackendLabels, func(i int) (string, string) { return fmt.Sprint("k", i), "v" })}),
		failMsg("33 labels", &TunnelGroupBackendBody{Labels: kv(MaxBackendLabels+1, func(i int) (string, string) { return fmt.Sprint("k", i), "v" })}, "labels", CodeInvalid, "at most 32"),
		failMsg("wildcard key", labels("*", "v"), "labels", CodeInvalid, `"*"="v"`),
		fail("wildcard value", labels("k", "*"), "labels", CodeInvalid),
		fail("empty key", labels("", "v"), "labels", CodeInvalid),
		fail("empty value", labels("k", ""), "labels", CodeInvalid),
		fail("key with a slash", labels("app.kubernetes.io/name", "web"), "labels", CodeInvalid),
		fail("key with a space", labels("my key", "v"), "labels", CodeInvalid),
		fail("value with =", labels("k", "a=b"), "labels", CodeInvalid),
		fail("value not ASCII", labels("k", "café"), "labels", CodeInvalid),
		fail("annotations first", &TunnelGroupBackendBody{AnnotationFields: AnnotationFields{Description: ptr("a\nb")}, Labels: map[string]string{"*": "*"}}, "description", CodeInvalid),
	})
}

// static is a static backend body with the address.
func static(addr string) *StaticBackendBody { return &StaticBackendBody{Address: &addr} }

// TestValidateStaticBackends: the address is a hostname, localhost, an IPv4 address or a
// bracketed IPv6 address, a colon and a port from 1 to 65535 in plain digits.
func TestValidateStaticBackends(t *testing.T) {
	const a = "address"
	runCases(t, []vcase{
		pass("update of nothing", fromJSON[StaticBackendBody](`{}`)),
		pass("hostname", fromJSON[StaticBackendBody](`{"address": "api.internal.example.com:443", "tls": {"enabled": true}}`)),
		pass("tls off", fromJSON[StaticBackendBody](`{"address": "example.com:80", "tls": {"enabled": false}}`)),
		pass("localhost", static("localhost:8080")),
		pass("localhost in capitals", static("LocalHost:8080")),
		fail("other single-label host", static("backend:8080"), a, CodeInvalid),
		pass("IPv4", static("192.0.2.10:80")),
		pass("IPv6", static("[2001:db8::1]:443")),
		pass("port 1", static("example.com:1")),
		pass("port 65535", static("example.com:65535")),
		failMsg("no port", static("example.com"), a, CodeInvalid, "host:port"),
		fail("empty", static(""), a, CodeInvalid),
		fail("empty port", static("example.com:"), a, CodeInvalid),
		fail("no host", static(":80"), a, CodeInvalid),
		fail("port 0", static("example.com:0"), a, CodeInvalid),
		fail("port 65536", static("example.com:65536"), a, CodeInvalid),
		fail("port with a leading zero", static("example.com:080"), a, CodeInvalid),
		fail("port with a plus sign", static("example.com:+80"), a, CodeInvalid),
		fail("port by name", static("example.com:http"), a, CodeInvalid),
		fail("IPv6 without brackets", static("2001:db8::1:443"), a, CodeInvalid),
		fail("IPv4 in brackets", static("[192.0.2.10]:80"), a, CodeInvalid),
		fail("garbage in brackets", static("[example.com]:80"), a, CodeInvalid),
		fail("URL", static("http://example.com:80"), a, CodeInvalid),
		fail("host with a path", static("example.com/api:80"), a, CodeInvalid),
		fail("underscore", static("my_api.example.com:80"), a, CodeInvalid),
		fail("space", static("example.com :80"), a, CodeInvalid),
		fail("annotations first", &StaticBackendBody{AnnotationFields: AnnotationFields{Metadata: ptr("\xff")}, Address: ptr("x")}, "metadata", CodeInvalid),
	})
}

// TestValidateHTTPResponseBackends: status_code from 100 to 599, a body of at most 64 KiB, and
// at most 64 headers with valid names (two names differing only in case are one header) and
// values without control characters but tab.
func TestValidateHTTPResponseBackends(t *testing.T) {
	hr := fromJSON[HTTPResponseBackendBody]
	status := func(n int32) *HTTPResponseBackendBody { return &HTTPResponseBackendBody{StatusCode: &n} }
	bodyOf := func(n int) *HTTPResponseBackendBody {
		return &HTTPResponseBackendBody{Body: ptr(strings.Repeat("b", n))}
	}
	runCases(t, []vcase{
		pass("update of nothing", hr(`{}`)),
		pass("everything", hr(`{"status_code": 503, "body": "down for maintenance", "headers": {"Content-Type": "text/plain", "Retry-After": "120", "x-empty": ""}}`)),
		pass("status 100", status(100)),
		pass("status 599", status(599)),
		failMsg("status 99", status(99), "status_code", CodeInvalid, "from 100 to 599"),
		fail("status 600", status(600), "status_code", CodeInvalid),
		fail("status 0", hr(`{"status_code": 0}`), "status_code", CodeInvalid),
		fail("negative status", status(-200), "status_code", CodeInvalid),
		pass("body of 64 KiB", bodyOf(MaxHTTPResponseBody)),
		failMsg("body of 64 KiB and a byte", bodyOf(MaxHTTPResponseBody+1), "body", CodeInvalid, "at most 65536 bytes"),
		pass("empty body", hr(`{"body": ""}`)),
		pass("64 headers", &HTTPResponseBackendBody{Headers: kv(MaxHeaderEntries, func(i int) (string, string) { return fmt.Sprint("X-H", i), "v" })}),
		fail("65 headers", &HTTPResponseBackendBody{Headers: kv(MaxHeaderEntries+1, func(i int) (string, string) { return fmt.Sprint("X-H", i), "v" })}, "headers", CodeTooManyHeaders),
		failMsg("bad header name", hr(`{"headers": {"Content Type": "text/plain"}}`), "headers", CodeInvalid, "not a valid HTTP header name"),
		fail("empty header name", hr(`{"headers": {"": "x"}}`), "headers", CodeInvalid),
		failMsg("same name in two cases", hr(`{"headers": {"Content-Type": "text/plain", "content-type": "text/html"}}`), "headers", CodeInvalid, `"Content-Type" and "content-type" are the same header name`),
		failMsg("value with CR LF", hr(`{"headers": {"X-A": "1\r\nSet-Cookie: a=b"}}`), "headers", CodeInvalid, "characters not allowed"),
		pass("value with a tab", hr(`{"headers": {"X-A": "a\tb"}}`)),
		fail("status before body", &HTTPResponseBackendBody{StatusCode: ptr(int32(1)), Body: ptr(strings.Repeat("b", MaxHTTPResponseBody+1))}, "status_code", CodeInvalid),
		fail("body before headers", &HTTPResponseBackendBody{Body: ptr(strings.Repeat("b", MaxHTTPResponseBody+1)), Headers: map[string]string{"": ""}}, "body", CodeInvalid),
		fail("annotations first", hr(`{"description": "a\tb", "status_code": 1}`), "description", CodeInvalid),
	})
}

// TestValidateFailoverAndWeightedBackends: a failover backend lists at most 32 backends, each
// once; a weighted backend maps at most 32 backends to weights from 0 to 10000.
func TestValidateFailoverAndWeightedBackends(t *testing.T) {
	ids := func(n int) []string { return strs(n, func(i int) string { return fmt.Sprint("bkdsa_", i) }) }
	weights := func(n int) map[string]int64 {
		w := map[string]int64{}
		for _, id := range ids(n) {
			w[id] = 1
		}
		return w
	}
	weight := func(w int64) *WeightedBackendBody {
		return &WeightedBackendBody{Backends: map[string]int64{"bkdsa_a": 1, "bkdsa_b": w}}
	}
	runCases(t, []vcase{
		pass("failover update of nothing", fromJSON[FailoverBackendBody](`{}`)),
		pass("failover", fromJSON[FailoverBackendBody](`{"backends": ["bkdtg_a", "bkdsa_b", "bkdhr_c"]}`)),
		pass("failover of none", fromJSON[FailoverBackendBody](`{"backends": []}`)),
		pass("failover of 32", &FailoverBackendBody{Backends: ids(MaxChildBackends)}),
		failMsg("failover of 33", &FailoverBackendBody{Backends: ids(MaxChildBackends + 1)}, "backends", CodeInvalid, "at most 32"),
		failMsg("failover listing one twice", fromJSON[FailoverBackendBody](`{"backends": ["bkdsa_a", "bkdsa_b", "bkdsa_a"]}`), "backends", CodeInvalid, `"bkdsa_a" is listed twice`),
		fail("failover annotations first", fromJSON[FailoverBackendBody](`{"description": "a\nb", "backends": ["x", "x"]}`), "description", CodeInvalid),
		pass("weighted update of nothing", fromJSON[WeightedBackendBody](`{}`)),
		pass("weighted", fromJSON[WeightedBackendBody](`{"backends": {"bkdsa_a": 90, "bkdsa_b": 10}}`)),
		pass("weight 0", weight(0)),
		pass("weight 10000", weight(MaxWeight)),
		failMsg("weight 10001", weight(MaxWeight+1), "backends", CodeInvalid, `the weight of "bkdsa_b" must be from 0 to 10000`),
		fail("negative weight", weight(-1), "backends", CodeInvalid),
		pass("weighted of 32", &WeightedBackendBody{Backends: weights(MaxChildBackends)}),
		fail("weighted of 33", &WeightedBackendBody{Backends: weights(MaxChildBackends + 1)}, "backends", CodeInvalid),
		fail("weighted annotations first", fromJSON[WeightedBackendBody](`{"metadata": "\u0000", "description": "\r", "backends": {"x": -1}}`), "description", CodeInvalid),
	})
}

// TestValidateHTTPResponseBackendFraming: the headers of an HTTP response backend may not set
// the response's framing, which the server derives from the body, nor hop-by-hop headers. Served
// as given (Go's server, checked by hand), a Content-Length of 2 for a 5-byte body answered an
// empty body and a broken connection, and "Transfer-Encoding: gzip" made clients refuse the
// response ("too many transfer encodings").
func TestValidateHTTPResponseBackendFraming(t *testing.T) {
	hr := fromJSON[HTTPResponseBackendBody]
	runCases(t, []vcase{
		fail("Content-Length", hr(`{"status_code": 200, "body": "hello", "headers": {"Content-Length": "2"}}`), "headers", CodeInvalid),
		fail("Transfer-Encoding", hr(`{"status_code": 200, "body": "hello", "headers": {"transfer-encoding": "gzip"}}`), "headers", CodeInvalid),
		fail("Connection", hr(`{"status_code": 200, "headers": {"connection": "close"}}`), "headers", CodeInvalid),
		pass("Content-Type", hr(`{"status_code": 200, "headers": {"Content-Type": "text/plain"}}`)),
	})
}
