package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// lintDir holds the npm package of the OpenAPI linter: Redocly's openapi-core, pinned by its
// lock file, and lint.mjs, which runs its recommended rules.
const lintDir = "testdata/openapi-lint"

// TestOpenAPIPassesRedoclyLint lints the served document with a linter nobody here wrote,
// Redocly's (the engine of `redocly lint`), with its recommended rules. Every problem it
// reports fails the test, warnings included (nullable without a type, an operation without a
// 4xx response or an operationId, and the rest), but the two lintAccepted names. It installs the linter with `npm ci` from the lock file (once:
// skipped when node_modules holds the locked version) and skips, saying why, when node or npm
// is missing or npm cannot install.
func TestOpenAPIPassesRedoclyLint(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the OpenAPI linter runs on Node.js 20 or newer")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: it installs the OpenAPI linter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if !lintInstalled(t) {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		install.Dir = lintDir
		if out, err := install.CombinedOutput(); err != nil {
			t.Skipf("npm ci could not install the OpenAPI linter (no registry?): %v\n%s", err, out)
		}
	}

	doc := fetchOpenAPI(t, newEnv(t))
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "lint.mjs", file)
	cmd.Dir = lintDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "Unsupported engine") || strings.Contains(stderr.String(), "SyntaxError") {
			t.Skipf("this Node.js cannot run the linter: %v\n%s", err, stderr.String())
		}
		t.Fatalf("the linter failed: %v\n%s", err, stderr.String())
	}
	var problems []struct{ RuleID, Severity, Message, Pointer string }
	if err := json.Unmarshal(stdout.Bytes(), &problems); err != nil {
		t.Fatalf("the linter's output is not its JSON report: %v\n%s", err, stdout.String())
	}
	byRule := map[string]int{}
	for _, p := range problems {
		if lintAccepted(p.RuleID, p.Pointer) {
			continue
		}
		byRule[p.Severity+" "+p.RuleID]++
		if byRule[p.Severity+" "+p.RuleID] <= 3 {
			t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, p.Pointer, p.Message)
		}
	}
	rules := make([]string, 0, len(byRule))
	for r, n := range byRule {
		rules = append(rules, fmt.Sprintf("%s: %d", r, n))
	}
	sort.Strings(rules)
	if len(rules) > 0 {
		t.Errorf("%d problems (the first three of each rule are above):\n%s", len(problems), strings.Join(rules, "\n"))
	}
}

// lintAccepted reports whether a problem the linter reports is accepted, on purpose: the
// document names no license because the project has none to name, and the unauthenticated
// operational endpoints (/healthz, /readyz, /openapi.json, /metrics) have no 4xx answer to
// declare: they take no parameters, no body and no key.
func lintAccepted(rule, pointer string) bool {
	switch rule {
	case "info-license":
		return true
	case "operation-4xx-response":
		for _, path := range []string{"/healthz", "/readyz", "/openapi.json", "/metrics"} {
			if strings.HasPrefix(pointer, "#/paths/"+strings.ReplaceAll(path, "/", "~1")+"/") {
				return true
			}
		}
	}
	return false
}

// lintInstalled reports whether node_modules holds the linter at the version the lock file pins.
func lintInstalled(t *testing.T) bool {
	t.Helper()
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	var have struct{ Version string }
	lockRaw, err := os.ReadFile(filepath.Join(lintDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(lockRaw, &lock); err != nil {
		t.Fatal(err)
	}
	const pkg = "node_modules/@redocly/openapi-core"
	haveRaw, err := os.ReadFile(filepath.Join(lintDir, pkg, "package.json"))
	if err != nil || json.Unmarshal(haveRaw, &have) != nil {
		return false
	}
	return have.Version != "" && have.Version == lock.Packages[pkg].Version
}
