package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// skipRecorder is a testing.TB that records a Skipf or Fatalf instead of ending the test that
// holds it; like the real ones, both end the calling goroutine.
type skipRecorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *skipRecorder) Helper() {}

func (r *skipRecorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *skipRecorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// installWith runs installOrSkip with an npm that is the shell script given, in a copy of the
// suite's package files, and returns what the test would have done.
func installWith(t *testing.T, script string) (*skipRecorder, string) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	npm := filepath.Join(t.TempDir(), "npm")
	if err := os.WriteFile(npm, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := &skipRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		installOrSkip(rec, context.Background(), npm, dir)
	}()
	<-done
	return rec, dir
}

// When npm cannot install the suite's packages (here it fails as it does without a registry),
// the official-client suite is skipped with a message giving npm's error, not failed; when npm
// installs them, the test goes on and the install is stamped so the next run skips npm.
func TestNPMCannotInstallSkips(t *testing.T) {
	rec, _ := installWith(t, "echo 'npm error code ENOTFOUND registry.npmjs.org' >&2\nexit 1\n")
	if !rec.skipped || rec.failed {
		t.Fatalf("a failing npm ci: skipped %v, failed %v (%s); want a skip", rec.skipped, rec.failed, rec.msg)
	}
	for _, want := range []string{"SKIPPED: npm could not install", "compatibility suite did not run", "ENOTFOUND registry.npmjs.org", "exit status 1"} {
		if !strings.Contains(rec.msg, want) {
			t.Errorf("skip message %q does not say %q", rec.msg, want)
		}
	}

	rec, dir := installWith(t, "mkdir -p node_modules\n")
	if rec.skipped || rec.failed {
		t.Fatalf("a working npm ci: skipped %v, failed %v (%s)", rec.skipped, rec.failed, rec.msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".edgeplane-e2e-installed")); err != nil {
		t.Fatalf("no install stamp: %v", err)
	}
}
