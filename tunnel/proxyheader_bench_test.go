package tunnel

import (
	"io"
	"testing"
)

// BenchmarkWriteProxyHeader is the header edgeplane writes at the start of every proxy stream
// (once per public connection or request carried to an agent).
func BenchmarkWriteProxyHeader(b *testing.B) {
	h := ProxyHeader{ID: "tn_3MVyg3ZoiWk9Ux1B85YxKan54NP", ClientAddr: "203.0.113.7:52814", Proto: "https", EdgeType: "3"}
	b.ReportAllocs()
	for b.Loop() {
		if err := writeProxyHeader(io.Discard, h); err != nil {
			b.Fatal(err)
		}
	}
}
