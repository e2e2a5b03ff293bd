package build

import (
	"os/exec"
	"strings"
	"testing"
)

// goListDeps lists the packages pkgs import, themselves included, as go
// list -deps does, run in dir.
func goListDeps(t *testing.T, dir string, pkgs ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, pkg := range pkgs {
		c := exec.Command("go", "list", "-deps", pkg)
		c.Dir = dir
		data, err := c.Output()
		if err != nil {
			t.Fatalf("go list -deps %s (in %s): %v", pkg, dir, err)
		}
		out[pkg] = strings.Fields(string(data))
	}
	return out
}

// The layers point one way: what is internal serves the lab and never
// imports it; the lab's configuration knows no driver (the lab checks its
// GPU names against the driver's catalog); the conformance module, which
// driver authors install, reaches nothing of dralab's own module.
func TestLayers(t *testing.T) {
	const mod = "github.com/dralab/dralab/"
	list := exec.Command("go", "list", "../...")
	data, err := list.Output()
	if err != nil {
		t.Fatalf("go list ../...: %v", err)
	}
	var internal []string
	for _, p := range strings.Fields(string(data)) {
		if strings.HasPrefix(p, mod+"internal/") {
			internal = append(internal, p)
		}
	}
	if len(internal) < 10 {
		t.Fatalf("found %d internal packages: %v", len(internal), internal)
	}
	for pkg, deps := range goListDeps(t, ".", internal...) {
		for _, d := range deps {
			if d == mod+"lab" {
				t.Errorf("%s imports %s (through go list -deps): internal packages serve the lab, they do not use it", pkg, d)
			}
		}
	}
	for _, d := range goListDeps(t, ".", mod+"lab/config")[mod+"lab/config"] {
		// The strict YAML decoder is published with the conformance
		// module, which depends on no driver.
		if strings.HasPrefix(d, mod+"drivers/") && d != mod+"drivers/conformance/strictyaml" {
			t.Errorf("lab/config imports %s: the lab, not its configuration, knows the drivers", d)
		}
	}
	for pkg, deps := range goListDeps(t, "../../drivers/conformance", "./...") {
		for _, d := range deps {
			if strings.HasPrefix(d, mod) && !strings.HasPrefix(d, mod+"drivers/conformance") {
				t.Errorf("the conformance module's %s imports %s, of dralab's own module", pkg, d)
			}
		}
	}
}
