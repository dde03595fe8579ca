package plan

import (
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestModuleTable: every key has its entry, names and bind options are unique, every module
// named in an entry is one the API knows (or the agents' legacy policy option), and a module
// with a stage on binds has one on routes too unless the API has no such route module.
func TestModuleTable(t *testing.T) {
	names, options := map[string]bool{}, map[string]bool{}
	for i, d := range modules {
		if d.name == "" || d.kind == 0 {
			t.Fatalf("module %d has no entry", i)
		}
		if names[d.name] {
			t.Errorf("%s: two entries", d.name)
		}
		names[d.name] = true
		for _, o := range d.options {
			if options[o] {
				t.Errorf("option %s: two modules", o)
			}
			options[o] = true
		}
		if d.kind == structure && (d.route != nil || d.bind != nil || d.conn != nil) {
			t.Errorf("%s: a structural module with a builder (Build or tlsSettings applies it)", d.name)
		}
		if m, ok := ModuleNamed(d.name); !ok || m != Module(i) || m.String() != d.name {
			t.Errorf("%s: ModuleNamed gives %v %v", d.name, m, ok)
		}
	}
	api := map[string]bool{}
	for _, m := range ep.Modules {
		api[m.Name] = true
	}
	for _, d := range modules {
		if !api[d.name] && d.name != "policy" {
			t.Errorf("%s: not a module of the API's table", d.name)
		}
	}
	if _, ok := ModuleNamed("no_such_module"); ok || Enforced("no_such_module") {
		t.Error("an unknown module is known")
	}
}
