// The rules of the tree: which package may import which, and what each
// binary links. They are tests so that a change that breaks one fails CI,
// and they live here, at the top, where a reader of the tree looks first.
package dralab_test

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/dralab/dralab/internal/build"
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

const mod = "github.com/dralab/dralab/"

// harness is where the programs that drive labs live (the soak, the scale
// bench, device:check, the scratch labs of test suites): they use the lab,
// so nothing the lab is built from may use them.
const harness = mod + "internal/harness/"

// The layers point one way: what is internal serves the lab and never
// imports it, except the harnesses, which only mage targets, commands and
// tests import; the lab's configuration knows no driver (the lab checks
// its GPU names against the driver's catalog); the two GPU inventories
// (fake and NVML) know each other only through drivers/gpu; the
// conformance module, which driver authors install, reaches nothing of
// dralab's own module.
func TestLayers(t *testing.T) {
	list := exec.Command("go", "list", "-tags", "mage", "-f", "{{.ImportPath}} {{.Name}} {{join .Imports \" \"}}", "./...")
	data, err := list.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var internal []string
	harnesses := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		p, name, imports := f[0], f[1], f[2:]
		if strings.HasPrefix(p, harness) {
			harnesses++
		} else if strings.HasPrefix(p, mod+"internal/") {
			internal = append(internal, p)
		}
		// What a kind of device is to a lab lives in internal/nodedrivers:
		// the lab, its backends and its process ask there, and only there,
		// or in a command or a harness (which drive one kind's driver),
		// are the NIC and CPU drivers and NVML imported.
		for _, d := range imports {
			kindDriver := d == mod+"drivers/fakenic" || d == mod+"drivers/fakecpu" || d == mod+"drivers/nvml"
			if kindDriver && !strings.HasPrefix(p, mod+"drivers/") && p != mod+"internal/nodedrivers" && name != "main" && !strings.HasPrefix(p, harness) {
				t.Errorf("%s imports %s: what a kind of device is to a lab lives in internal/nodedrivers", p, d)
			}
		}
		// A kind's command (drivers/*app) is reached through its kind:
		// dralab-driver takes every kind's command from
		// internal/nodedrivers, so that a new kind is no line in it. The
		// GPU driver's is dralab-driver's own root, outside nodedrivers:
		// it links NVML, which the lab's binaries must not
		// (TestNVMLAndPluginNeverShareABinary).
		for _, d := range imports {
			app := d == mod+"drivers/nicapp" || d == mod+"drivers/cpuapp"
			if app && p != mod+"internal/nodedrivers" {
				t.Errorf("%s imports %s: a kind's command is internal/nodedrivers' to give (nodedrivers.Command)", p, d)
			}
		}
		// A harness drives a lab through the lab API (its status, its
		// drivers' restarts, its nodes' sockets), whatever its backend:
		// the embedded backend's state files are the lab's to read.
		for _, d := range imports {
			if strings.HasPrefix(p, harness) && d == mod+"internal/labstate" {
				t.Errorf("%s imports %s: a harness asks the lab, not the embedded backend's state directory", p, d)
			}
		}
		// Only commands (mage's targets are package main too) and other
		// harnesses build on a harness.
		for _, d := range imports {
			if strings.HasPrefix(d, harness) && name != "main" && !strings.HasPrefix(p, harness) {
				t.Errorf("%s imports %s: a harness drives labs for commands and tests, nothing else builds on it", p, d)
			}
		}
	}
	if len(internal) < 10 || harnesses < 4 {
		t.Fatalf("found %d internal packages and %d harnesses: %v", len(internal), harnesses, internal)
	}
	for pkg, deps := range goListDeps(t, ".", internal...) {
		for _, d := range deps {
			if d == mod+"lab" {
				t.Errorf("%s imports %s (through go list -deps): internal packages serve the lab, they do not use it", pkg, d)
			}
		}
	}
	for _, d := range goListDeps(t, ".", mod+"lab/config")[mod+"lab/config"] {
		// The strict YAML decoder and the nearest-name finder are
		// published with the conformance module, which depends on no
		// driver.
		if strings.HasPrefix(d, mod+"drivers/") && d != mod+"drivers/conformance/strictyaml" && d != mod+"drivers/conformance/nearest" {
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
	// The driver kit is an SDK: it builds on nothing of dralab's but
	// itself (and internal/natural, an order of names that is no lab's),
	// so that a second driver (or someone else's) takes it alone.
	for pkg, deps := range goListDeps(t, ".", "./drivers/kit/...") {
		for _, d := range deps {
			if strings.HasPrefix(d, mod) && !strings.HasPrefix(d, mod+"drivers/kit") && d != mod+"internal/natural" {
				t.Errorf("%s imports %s (through go list -deps): the driver kit imports nothing of dralab's but itself and internal/natural", pkg, d)
			}
		}
	}
	// The GPU driver's library holds what its inventories share; the
	// application that picks an inventory lives beside it (drivers/gpuapp),
	// not inside it.
	for pkg, deps := range goListDeps(t, ".", "./drivers/gpu/...") {
		for _, d := range deps {
			if d == mod+"drivers/fakegpu" || d == mod+"drivers/nvml" {
				t.Errorf("%s imports %s: an application that picks an inventory lives beside drivers/gpu, in drivers/gpuapp", pkg, d)
			}
		}
	}
	// The NIC driver is a second driver on the kit: it shares the kit and
	// the fake servers' PCI layout with the GPU driver, nothing else, so
	// that its NICs line up with the GPUs by the layout, not by reaching
	// into the GPU driver.
	for pkg, deps := range goListDeps(t, ".", mod+"drivers/fakenic", mod+"drivers/nicapp", mod+"drivers/pcilayout") {
		for _, d := range deps {
			if !strings.HasPrefix(d, mod) || d == pkg || strings.HasPrefix(d, mod+"drivers/kit") || d == mod+"internal/natural" || d == mod+"drivers/pcilayout" {
				continue
			}
			if pkg == mod+"drivers/nicapp" && d == mod+"drivers/fakenic" {
				continue
			}
			t.Errorf("%s imports %s (through go list -deps): the NIC driver builds on the kit and drivers/pcilayout only", pkg, d)
		}
	}
	// The CPU driver is a third driver on the kit, and on nothing else of
	// dralab's.
	for pkg, deps := range goListDeps(t, ".", mod+"drivers/fakecpu", mod+"drivers/cpuapp") {
		for _, d := range deps {
			if !strings.HasPrefix(d, mod) || d == pkg || strings.HasPrefix(d, mod+"drivers/kit") || d == mod+"internal/natural" {
				continue
			}
			if pkg == mod+"drivers/cpuapp" && d == mod+"drivers/fakecpu" {
				continue
			}
			t.Errorf("%s imports %s (through go list -deps): the CPU driver builds on the kit only", pkg, d)
		}
	}
	// dralab-driver, the binary a cluster's DaemonSets run, takes its
	// commands from internal/nodedrivers but stays a driver's binary:
	// nothing of Kubernetes' own module, nothing of the lab's runtime
	// (its processes, real nodes, harnesses).
	for pkg, deps := range goListDeps(t, ".", mod+"cmd/dralab-driver") {
		for _, d := range deps {
			if strings.HasPrefix(d, "k8s.io/kubernetes/") || d == mod+"internal/realnode" || strings.HasPrefix(d, mod+"internal/labserver") || strings.HasPrefix(d, harness) || strings.HasPrefix(d, mod+"lab/internal") {
				t.Errorf("%s reaches %s (through go list -deps): the driver binary stays light", pkg, d)
			}
		}
	}
	// The lab process's supervisor is given its control plane, not built
	// with it: test:race runs its tests under the race detector, which
	// would otherwise compile the API server, scheduler and controller
	// manager with -race (most of a cold CI's race run).
	for pkg, deps := range goListDeps(t, ".", mod+"internal/labserver") {
		for _, d := range deps {
			if d == mod+"internal/controlplane" || strings.HasPrefix(d, "k8s.io/kubernetes/cmd/") {
				t.Errorf("%s reaches %s (through go list -deps): the control plane is passed to it (Options.StartControlPlane)", pkg, d)
			}
		}
	}
	for pkg, deps := range goListDeps(t, "drivers/conformance", "./...") {
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
	internal := names(".", "./...")
	for name, path := range internal {
		if !strings.Contains(path, "/internal/") {
			delete(internal, name)
		}
	}
	if len(internal) < 10 {
		t.Fatalf("found %d internal packages", len(internal))
	}
	public := []struct{ dir, pkg string }{
		{".", "./lab"}, {".", "./lab/config"}, {".", "./lab/status"},
		{".", "./scenarios"}, {"drivers/conformance", "./allocation"}, {"drivers/conformance", "./devices"},
		{"drivers/conformance", "."}, {"drivers/conformance", "./sanity"}, {"drivers/conformance", "./cluster"},
		{"drivers/conformance", "./manifest"}, {"drivers/conformance", "./results"}, {"drivers/conformance", "./target"},
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

// heavy are the modules only some targets need, which a workshop's first
// lab:up (the mage binary, then the dralab binary) must not compile: Helm
// and kind (the kind backend's dralab-kind), Helm's WebAssembly runtime,
// kustomize and OCI client, plotting (bench:scale) and the browser driver
// (the dashboard's tests).
var heavy = []string{
	"helm.sh/helm/", "sigs.k8s.io/kind/", "github.com/tetratelabs/wazero", "sigs.k8s.io/kustomize/",
	"oras.land/", "gonum.org/v1/plot", "github.com/chromedp/",
}

// Each binary links what it runs: the mage binary and the dralab binary
// none of the heavy modules; dralab-kind (the kind backend) and
// dralab-harness (the heavy targets) are where they went.
func TestBinariesLinkOnlyWhatTheyRun(t *testing.T) {
	deps := func(tags, pkg string) []string {
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, pkg)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	for _, bin := range []struct{ tags, pkg string }{{"mage", mod + "magefiles"}, {"", mod + "cmd/dralab"}} {
		for _, d := range deps(bin.tags, bin.pkg) {
			for _, h := range heavy {
				if strings.HasPrefix(d, h) {
					t.Errorf("%s links %s: only dralab-kind and dralab-harness may (see heavy)", bin.pkg, d)
					break
				}
			}
		}
	}
	for pkg, want := range map[string]string{
		mod + "lab/internal/kind/dralab-kind":       "sigs.k8s.io/kind/pkg/cluster",
		mod + "internal/harness/cmd/dralab-harness": "gonum.org/v1/plot",
	} {
		if !slices.Contains(deps("", pkg), want) {
			t.Errorf("%s does not link %s: the test no longer guards anything", pkg, want)
		}
	}
}

// go-nvml resolves NVML's symbols lazily, at their first call; a binary
// that also links Go's plugin package (kustomize, through Helm) is linked
// with BIND_NOW and dies at start on a machine without NVML ("symbol lookup
// error: undefined symbol: nvml…"). So go-nvml stays in the driver binary,
// and the driver binary stays away from plugin.
func TestNVMLAndPluginNeverShareABinary(t *testing.T) {
	deps := func(tags string, pkg string) []string {
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, pkg)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const nvml = "github.com/NVIDIA/go-nvml/pkg/nvml"
	driver := deps("", "github.com/dralab/dralab/cmd/"+build.DriverBinary)
	if !slices.Contains(driver, nvml) {
		t.Errorf("the driver does not link %s: the test no longer guards anything", nvml)
	}
	if slices.Contains(driver, "plugin") {
		t.Errorf("the driver links Go's plugin package next to go-nvml")
	}
	for _, pkg := range []string{"github.com/dralab/dralab/cmd/dralab", "github.com/dralab/dralab/magefiles"} {
		tags := ""
		if strings.HasSuffix(pkg, "magefiles") {
			tags = "mage"
		}
		if d := deps(tags, pkg); slices.Contains(d, nvml) {
			t.Errorf("%s links %s; only the driver may", pkg, nvml)
		}
	}
}

// TestConformanceModuleBuildsWhatTheMainBuilds: every module whose
// packages the light module (drivers/conformance: the conformance suite and
// kubectl dra) compiles, tests included, is at the version the main module
// selects. Otherwise a shared package (golang.org/x/sys under client-go)
// differs between the two, and every package above it is compiled twice on
// every platform: on a cold cache that was 167 s more per platform.
func TestConformanceModuleBuildsWhatTheMainBuilds(t *testing.T) {
	modules := func(dir string, args ...string) map[string]string {
		c := exec.Command("go", args...)
		c.Dir = dir
		data, err := c.Output()
		if err != nil {
			t.Fatalf("go %s (in %s): %v", strings.Join(args, " "), dir, err)
		}
		out := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if path, version, ok := strings.Cut(line, " "); ok && version != "" {
				out[path] = version
			}
		}
		return out
	}
	const format = "{{with .Module}}{{.Path}} {{.Version}}{{end}}"
	light := modules("drivers/conformance", "list", "-deps", "-test", "-f", format, "./...")
	main := modules(".", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	for _, path := range slices.Sorted(maps.Keys(light)) {
		if v, ok := main[path]; ok && v != light[path] {
			t.Errorf("drivers/conformance builds %s %s, the main module %s: run go get %s@%s there (in drivers/conformance)", path, light[path], v, path, v)
		}
	}
}
