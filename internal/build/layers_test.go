package build

import (
	"maps"
	"os/exec"
	"slices"
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
// GPU names against the driver's catalog); the two GPU inventories (fake
// and NVML) know each other only through drivers/gpu; the conformance
// module, which
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
	// The NVML inventory and the fake one share what GPUs have in common
	// through drivers/gpu; neither builds on the other.
	other := map[string]string{
		mod + "drivers/nvml":         mod + "drivers/fakegpu",
		mod + "drivers/nvml/nvmllib": mod + "drivers/fakegpu",
		mod + "drivers/fakegpu":      mod + "drivers/nvml",
	}
	for pkg, deps := range goListDeps(t, ".", slices.Collect(maps.Keys(other))...) {
		if slices.Contains(deps, other[pkg]) {
			t.Errorf("%s imports %s: what both inventories share lives in drivers/gpu", pkg, other[pkg])
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

// The public packages' API, as go doc shows it, names no type of an
// internal package: a caller could not name it.
func TestPublicAPIMentionsNoInternalType(t *testing.T) {
	names := func(dir, pattern string) map[string]string {
		cmd := exec.Command("go", "list", "-f", "{{.Name}} {{.ImportPath}}", pattern)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pattern, err)
		}
		m := map[string]string{}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for _, l := range lines {
			name, path, _ := strings.Cut(l, " ")
			m[name] = path
		}
		return m
	}
	internal := names("../..", "./...")
	for name, path := range internal {
		if !strings.Contains(path, "/internal/") {
			delete(internal, name)
		}
	}
	if len(internal) < 10 {
		t.Fatalf("found %d internal packages", len(internal))
	}
	public := []struct{ dir, pkg string }{
		{"../..", "./lab"}, {"../..", "./lab/config"}, {"../..", "./lab/status"}, {"../..", "./lab/labtest"},
		{"../..", "./scenarios"}, {"../..", "./scenarios/report"},
		{"../../drivers/conformance", "."}, {"../../drivers/conformance", "./sanity"}, {"../../drivers/conformance", "./cluster"},
		{"../../drivers/conformance", "./manifest"}, {"../../drivers/conformance", "./results"}, {"../../drivers/conformance", "./target"},
	}
	for _, p := range public {
		cmd := exec.Command("go", "doc", "-all", p.pkg)
		cmd.Dir = p.dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", p.pkg, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// Comments are indented; declarations are not.
			if strings.HasPrefix(line, "    ") {
				continue
			}
			for name, path := range internal {
				if strings.Contains(line, name+".") && containsQualified(line, name) {
					t.Errorf("%s: %q names a type or value of %s", p.pkg, strings.TrimSpace(line), path)
				}
			}
		}
	}
}

// containsQualified tells whether line has name.Identifier, not as the
// tail of a longer word.
func containsQualified(line, name string) bool {
	for i := strings.Index(line, name+"."); i >= 0; {
		before := i == 0 || !isWordChar(line[i-1])
		j := i + len(name) + 1
		if before && j < len(line) && line[j] >= 'A' && line[j] <= 'Z' {
			return true
		}
		next := strings.Index(line[i+1:], name+".")
		if next < 0 {
			return false
		}
		i += 1 + next
	}
	return false
}

func isWordChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
