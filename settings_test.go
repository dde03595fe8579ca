package edgeplane

import (
	"slices"
	"testing"
)

// TestParseSettings: defaults for empty values, lists lowercased and deduplicated, and typos
// refused at startup.
func TestParseSettings(t *testing.T) {
	s, err := ParseSettings("", "")
	if err != nil || !slices.Equal(s.ServiceDomains, []string{DefaultServiceDomains}) || s.CNAMEZone != DefaultCNAMEZone {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, err = ParseSettings(" Example.NET, corp.test,,example.net ", "Targets.Example.org")
	if err != nil || !slices.Equal(s.ServiceDomains, []string{"example.net", "corp.test"}) || s.CNAMEZone != "targets.example.org" {
		t.Fatalf("parsed: %+v %v", s, err)
	}
	for _, c := range [][2]string{{"localhost", ""}, {"exa mple.com", ""}, {",", ""}, {"", "zone"}, {"", "*.example.com"}} {
		if _, err := ParseSettings(c[0], c[1]); err == nil {
			t.Fatalf("ParseSettings(%q, %q) should fail", c[0], c[1])
		}
	}
	if got := (Settings{}).effective(); !slices.Equal(got.ServiceDomains, DefaultSettings().ServiceDomains) || got.CNAMEZone != DefaultCNAMEZone {
		t.Fatalf("zero settings should act as the defaults: %+v", got)
	}
}
