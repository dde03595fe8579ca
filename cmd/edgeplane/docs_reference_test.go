package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	// helpFlagRE finds a flag in a command's help: flag.PrintDefaults starts each with "  -name".
	helpFlagRE = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	// cellFlagRE finds `[command words] --flag` in the first cell of a configuration row.
	cellFlagRE = regexp.MustCompile("`([a-z -]*?)--([a-z0-9-]+)`")
)

// operationsSection returns the text of docs/operations.md's "## title" section.
func operationsSection(t *testing.T, title string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## "+title+"\n")
	if !ok {
		t.Fatalf(`docs/operations.md has no "## %s" section`, title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// documentedFlags returns the "command --flag" pairs of the table in docs/operations.md's
// Configuration section. A cell names a flag with its command (`serve --db`) or, after the first,
// alone, meaning the same command (`serve --http-listen`, `--https-listen`).
func documentedFlags(t *testing.T) map[string]bool {
	t.Helper()
	documented := map[string]bool{}
	for _, line := range strings.Split(operationsSection(t, "Configuration"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		cmd := ""
		for _, m := range cellFlagRE.FindAllStringSubmatch(cells[1], -1) {
			if words := strings.TrimSpace(m[1]); words != "" {
				cmd = words
			}
			if cmd == "" {
				t.Errorf("docs/operations.md: %q names a flag without its command", cells[1])
				continue
			}
			documented[cmd+" --"+m[2]] = true
		}
	}
	return documented
}

// Every flag of every command's help is a row of the configuration table in docs/operations.md,
// which the README sends readers to for "all of them", and every flag that table names exists:
// a flag added, renamed or removed without the table fails here rather than in a reader's shell.
func TestEveryFlagIsDocumented(t *testing.T) {
	t.Parallel()
	documented := documentedFlags(t)
	inHelp := map[string]bool{}
	for _, c := range commands {
		help, _, code := runBin(t, nil, append(strings.Fields(c.name), "-h")...)
		if code != 0 {
			t.Fatalf("edgeplane %s -h: exit %d", c.name, code)
		}
		for _, m := range helpFlagRE.FindAllStringSubmatch(help, -1) {
			inHelp[c.name+" --"+m[1]] = true
		}
	}
	if len(inHelp) < 60 {
		t.Fatalf("found only %d flags in the commands' help: does the help still list flags as \"  -name\"?", len(inHelp))
	}
	var missing, stale []string
	for f := range inHelp {
		if !documented[f] {
			missing = append(missing, f)
		}
	}
	for f := range documented {
		if !inHelp[f] {
			stale = append(stale, f)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, f := range missing {
		t.Errorf("edgeplane %s is not in docs/operations.md's configuration table", f)
	}
	for _, f := range stale {
		t.Errorf("docs/operations.md's configuration table names edgeplane %s, which its help does not list", f)
	}
	// The README's short table names serve's flags alone.
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal(`README.md has no "## Configuration" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	named := 0
	for _, line := range strings.Split(table, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 && strings.HasPrefix(line, "|") {
			for _, m := range cellFlagRE.FindAllStringSubmatch(cells[1], -1) {
				named++
				if !inHelp["serve --"+m[2]] {
					t.Errorf("README.md's configuration table names --%s, which serve's help does not list", m[2])
				}
			}
		}
	}
	if named < 8 {
		t.Errorf("README.md's configuration table names only %d flags: does it still look like this test expects?", named)
	}
}

var (
	// metricTypeRE finds a metric family in the Prometheus text format.
	metricTypeRE = regexp.MustCompile(`(?m)^# TYPE (edgeplane_[a-z0-9_]+) `)
	// cellMetricRE finds a metric's name in the first cell of the metrics table, whole
	// (`edgeplane_db_connections_open`) or as a suffix of the name before it (`_in_use`).
	cellMetricRE = regexp.MustCompile("`(edgeplane)?(_[a-z0-9_]+)`")
)

// peerMetrics are series of the link between replicas: they appear once another replica is
// known, which one SQLite server never has.
var peerMetrics = map[string]bool{"edgeplane_peer_link_up": true, "edgeplane_peer_streams_open": true,
	"edgeplane_peer_forwarded_total": true, "edgeplane_peer_bytes_total": true, "edgeplane_remote_tunnels": true}

// documentedMetrics returns the edgeplane_ metrics of the table in docs/operations.md's Metrics
// section.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	documented := map[string]bool{}
	for _, line := range strings.Split(operationsSection(t, "Metrics"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		last := ""
		for _, m := range cellMetricRE.FindAllStringSubmatch(cells[1], -1) {
			name := m[1] + m[2]
			if m[1] == "" { // `_in_use` after `edgeplane_db_connections_open`
				if i := strings.LastIndex(last, "_"); last != "" && i > 0 {
					name = last[:i] + m[2]
				} else {
					t.Errorf("docs/operations.md: %q abbreviates a metric without a whole name before it", cells[1])
					continue
				}
			} else {
				last = name
			}
			documented[name] = true
		}
	}
	return documented
}

// Every edgeplane_ metric a server with the data plane on serves is a row of the metrics table in
// docs/operations.md, and every metric the table names is served (but the link's, which need
// another replica): an operator's dashboard is built from that table.
func TestEveryMetricIsDocumented(t *testing.T) {
	t.Parallel()
	documented := documentedMetrics(t)
	p := startServer(t, filepath.Join(t.TempDir(), "edgeplane.db"), "--agent-listen", "127.0.0.1:0",
		"--http-listen", "127.0.0.1:0", "--https-listen", "127.0.0.1:0", "--acme-directory", "")
	// Twice: the request series appear once a request has been answered, the first scrape.
	var body []byte
	for range 2 {
		res, err := client.Get(p.url("/metrics"))
		if err != nil {
			t.Fatal(err)
		}
		body, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("GET /metrics: %d %v", res.StatusCode, err)
		}
	}
	served := map[string]bool{}
	for _, m := range metricTypeRE.FindAllStringSubmatch(string(body), -1) {
		served[m[1]] = true
	}
	if len(served) < 20 || len(documented) < 20 {
		t.Fatalf("%d metrics served, %d documented: do the patterns still match?", len(served), len(documented))
	}
	var missing, stale []string
	for name := range served {
		if !documented[name] {
			missing = append(missing, name)
		}
	}
	for name := range documented {
		if !served[name] && !peerMetrics[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, name := range missing {
		t.Errorf("%s is served but not in docs/operations.md's metrics table", name)
	}
	for _, name := range stale {
		t.Errorf("docs/operations.md's metrics table names %s, which the server does not serve", name)
	}
}
