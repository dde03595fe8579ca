package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxUnitExposure is the exposure score `systemd-analyze security` gives deploy/edgeplane.service
// (5.6 before the unit was hardened). A change that weakens the unit fails the test; one that
// strengthens it may lower the bound.
const maxUnitExposure = 1.1

var exposureRE = regexp.MustCompile(`Overall exposure level for [^:]+: ([0-9.]+)`)

// TestSystemdUnitHardened checks the example unit with systemd's own analyzer, when it is
// installed: the unit must verify without a warning, and its exposure score must not rise above
// maxUnitExposure.
func TestSystemdUnitHardened(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd)")
	}
	src, err := os.ReadFile("../../deploy/edgeplane.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart names an executable; the binary is not installed here, so
	// point it at one that exists. Nothing runs it.
	unit := strings.Replace(string(src), "ExecStart=/usr/local/bin/edgeplane ", "ExecStart=/bin/true ", 1)
	if unit == string(src) {
		t.Fatal("the unit's ExecStart is no longer /usr/local/bin/edgeplane serve; update this test")
	}
	path := filepath.Join(t.TempDir(), "edgeplane.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=true", path).CombinedOutput()
	if strings.Contains(string(out), "--offline") || strings.Contains(string(out), "Unknown command") {
		t.Skipf("this systemd-analyze cannot score a unit file offline (systemd 252 or later can):\n%s", out)
	}
	m := exposureRE.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("systemd-analyze security: %v; no exposure score in:\n%s", err, out)
	}
	score, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	if score > maxUnitExposure {
		t.Errorf("exposure %.1f, above %.1f: a hardening setting was removed or weakened\n%s", score, maxUnitExposure, out)
	}
	t.Logf("exposure %.1f", score)
}
