package mageboot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magefile/mage/mage"
	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/ui"
)

// module writes a module whose mage target imports a package of its own,
// with content no earlier run compiled, so that the Go build cache lacks
// it; mage's cache is a new directory.
func module(t *testing.T, dep string) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv(mg.CacheEnv, t.TempDir())
	for name, content := range map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.26\n",
		"dep/dep.go":         dep,
		"magefiles/build.go": "//go:build mage\n\npackage main\n\nimport \"example.com/m/dep\"\n\n// Build builds.\nfunc Build() { dep.Do() }\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func fresh() string {
	return fmt.Sprintf("package dep\n\n// Do does.\nfunc Do() { println(%q) }\n", time.Now().String())
}

// goBuildV lists what go build -v compiles of pkg in dir: nothing once
// the Go build cache holds it.
func goBuildV(t *testing.T, dir, pkg string) string {
	t.Helper()
	c := exec.Command("go", "build", "-v", pkg)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -v %s: %v\n%s", pkg, err, out)
	}
	return strings.TrimSpace(string(out))
}

// The first run of a target compiles what the targets import, on a line
// that says so and how far it has come; mage then finds it compiled.
func TestPrepareCompilesWhatTheTargetsImport(t *testing.T) {
	dir := module(t, fresh())
	var out bytes.Buffer
	if err := Prepare(context.Background(), ui.New(&out), dir, []string{"-v", "build"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		" • " + Step + " ...\n",
		"   " + Step + ": compiling (the first time, and after a change), 1 package",
		" ✓ " + Step + " (",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Prepare wrote\n%s\nlacking %q", out.String(), want)
		}
	}
	if got := goBuildV(t, dir, "example.com/m/dep"); got != "" {
		t.Errorf("after Prepare, go build -v still compiles %q", got)
	}
}

// With mage's binary for these magefiles in its cache, or a command line
// that compiles no target, Prepare neither builds nor writes.
func TestPrepareLeavesWhatMageNeedsNot(t *testing.T) {
	dir := module(t, fresh())
	for _, args := range [][]string{nil, {"-l"}, {"-h", "build"}, {"-clean"}, {"-d", "magefiles", "build"}, {"-nosuchflag", "build"}} {
		var out bytes.Buffer
		if err := Prepare(context.Background(), ui.New(&out), dir, args); err != nil || out.Len() > 0 {
			t.Errorf("Prepare(%q) = %v, wrote %q; want nothing", args, err, out.String())
		}
	}
	if got := goBuildV(t, dir, "example.com/m/dep"); got != "example.com/m/dep" {
		t.Errorf("go build -v compiles %q; Prepare should have compiled nothing", got)
	}

	magefiles := filepath.Join(dir, mage.MagefilesDirName)
	files, err := mage.Magefiles(magefiles, "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := mage.ExeName(mg.GoCmd(), mg.CacheDir(), files)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dep", "dep.go"), []byte(fresh()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Prepare(context.Background(), ui.New(&out), dir, []string{"build"}); err != nil || out.Len() > 0 {
		t.Errorf("with mage's binary there, Prepare = %v, wrote %q; want nothing", err, out.String())
	}
	if got := goBuildV(t, dir, "example.com/m/dep"); got != "example.com/m/dep" {
		t.Errorf("go build -v compiles %q; Prepare should have compiled nothing", got)
	}
}

// A package that does not compile ends the step with ✗ and an error that
// quotes the compiler.
func TestPrepareSaysWhatDoesNotCompile(t *testing.T) {
	dir := module(t, "package dep\n\nfunc Do() { undefinedThing() }\n")
	var out bytes.Buffer
	err := Prepare(context.Background(), ui.New(&out), dir, []string{"build"})
	if err == nil || !strings.Contains(err.Error(), "dep.go:3:13: undefined: undefinedThing") {
		t.Errorf("Prepare = %v, want the compiler's error", err)
	}
	if !strings.Contains(out.String(), " ✗ "+Step) {
		t.Errorf("Prepare wrote %q, lacking the failed step", out.String())
	}
}
