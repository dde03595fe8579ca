package main

import (
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

// documentedFlags returns the "command --flag" pairs of the table in docs/operations.md's
// Configuration section. A cell names a flag with its command (`serve --db`) or, after the first,
// alone, meaning the same command (`serve --http-listen`, `--https-listen`).
func documentedFlags(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Configuration\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "## Configuration" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
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
	real := map[string]bool{}
	for _, c := range commands {
		help, _, code := runBin(t, nil, append(strings.Fields(c.name), "-h")...)
		if code != 0 {
			t.Fatalf("edgeplane %s -h: exit %d", c.name, code)
		}
		for _, m := range helpFlagRE.FindAllStringSubmatch(help, -1) {
			real[c.name+" --"+m[1]] = true
		}
	}
	if len(real) < 60 {
		t.Fatalf("found only %d flags in the commands' help: does the help still list flags as \"  -name\"?", len(real))
	}
	var missing, stale []string
	for f := range real {
		if !documented[f] {
			missing = append(missing, f)
		}
	}
	for f := range documented {
		if !real[f] {
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
}
