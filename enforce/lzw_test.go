package enforce

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// lzwInputs are texts of every kind of repetition, random bytes, and inputs long enough to fill
// the dictionary (8,192 codes) so that it starts again with a CLEAR.
func lzwInputs() map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 80_000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	var page strings.Builder
	for i := range 5000 {
		page.WriteString("<li class=\"item\">entry " + strconv.Itoa(i) + " of the compressible page</li>\n")
	}
	return map[string][]byte{
		"empty": nil, "one byte": []byte("a"), "repeated": bytes.Repeat([]byte("a"), 100_000),
		"ababab": []byte("TOBEORNOTTOBEORTOBEORNOT#"), "page": []byte(page.String()), "random": random,
		"small page": []byte(page.String()[:20_000]),
	}
}

func lzwCompress(t *testing.T, in []byte, flushEvery int) []byte {
	t.Helper()
	var out bytes.Buffer
	z := newLZWWriter(&out)
	for len(in) > 0 {
		n := len(in)
		if flushEvery > 0 {
			n = min(n, flushEvery)
		}
		if _, err := z.Write(in[:n]); err != nil {
			t.Fatal(err)
		}
		if flushEvery > 0 {
			if err := z.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		in = in[n:]
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestLZWDecodesWithCompressTools: what lzwWriter writes, with and without flushes, is decoded
// to the input by gzip -d and, where Debian's ncompress is installed (.ci/run installs it), by
// the compress program's uncompress; and
// without flushes, until the dictionary fills, it is byte for byte what the compress program
// writes for the same input.
func TestLZWDecodesWithCompressTools(t *testing.T) {
	tools := [][]string{{"gzip", "-dc"}}
	if p, err := exec.LookPath("uncompress"); err == nil {
		tools = append(tools, []string{p, "-c"})
	}
	compress, _ := exec.LookPath("compress")
	for name, in := range lzwInputs() {
		for _, flushEvery := range []int{0, 1, 7, 1000} {
			if flushEvery > 0 && flushEvery < 1000 && len(in) > 10_000 {
				continue
			}
			z := lzwCompress(t, in, flushEvery)
			for _, tool := range tools {
				cmd := exec.Command(tool[0], tool[1:]...)
				cmd.Stdin = bytes.NewReader(z)
				got, err := cmd.Output()
				if err != nil || !bytes.Equal(got, in) {
					t.Errorf("%s, flushed every %d: %s decoded %d bytes of %d (%v)", name, flushEvery, tool[0], len(got), len(in), err)
				}
			}
			// Once the dictionary is full, compress starts it again only when the ratio falls,
			// where lzwWriter does at once: the bytes differ from there on (both decode).
			if compress != "" && flushEvery == 0 && len(in) > 0 && name != "page" && name != "random" {
				f, _ := os.CreateTemp(t.TempDir(), "in")
				f.Write(in)
				f.Close()
				want, err := exec.Command(compress, "-c", "-f", "-b", strconv.Itoa(lzwMaxBits), f.Name()).Output()
				if err != nil && len(want) == 0 {
					t.Fatalf("compress: %v", err)
				}
				if !bytes.Equal(z, want) {
					t.Errorf("%s: %d bytes, compress wrote %d (first difference at %d)", name, len(z), len(want), firstDiff(z, want))
				}
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
