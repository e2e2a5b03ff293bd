package mageboot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magefile/mage/mage"
	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/build"
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
	if _, err := Prepare(context.Background(), ui.New(&out), dir, []string{"-v", "build"}); err != nil {
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
		if env, err := Prepare(context.Background(), ui.New(&out), dir, args); err != nil || out.Len() > 0 || env != nil {
			t.Errorf("Prepare(%q) = %v, %v, wrote %q; want nothing", args, env, err, out.String())
		}
	}
	if got := goBuildV(t, dir, "example.com/m/dep"); got != "example.com/m/dep" {
		t.Errorf("go build -v compiles %q; Prepare should have compiled nothing", got)
	}

	exe := exeOf(t, dir)
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dep", "dep.go"), []byte(fresh()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	env, err := Prepare(context.Background(), ui.New(&out), dir, []string{"build"})
	if err != nil || out.Len() > 0 || env[mg.HashFastEnv] != "" {
		t.Errorf("with mage's binary there, Prepare = %v, %v, wrote %q; want nothing, and mage to check its binary", env, err, out.String())
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
	_, err := Prepare(context.Background(), ui.New(&out), dir, []string{"build"})
	if err == nil || !strings.Contains(err.Error(), "dep.go:3:13: undefined: undefinedThing") {
		t.Errorf("Prepare = %v, want the compiler's error", err)
	}
	if !strings.Contains(out.String(), " ✗ "+Step) {
		t.Errorf("Prepare wrote %q, lacking the failed step", out.String())
	}
}

// exeOf is where mage keeps its binary for dir's magefiles.
func exeOf(t *testing.T, dir string) string {
	t.Helper()
	files, err := mage.Magefiles(filepath.Join(dir, mage.MagefilesDirName), "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := mage.ExeName(mg.GoCmd(), mg.CacheDir(), files)
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// Once mage's binary has run (Built), mage runs it at once while the tree
// stays as it was (MAGEFILE_HASHFAST), and asks the go command again after
// any change: a file touched, a file added, the Go settings changed, the
// binary replaced.
func TestUnchangedTreeRunsMagesBinaryAtOnce(t *testing.T) {
	dir := module(t, fresh())
	prepare := func() map[string]string {
		t.Helper()
		env, err := Prepare(context.Background(), ui.New(io.Discard), dir, []string{"build"})
		if err != nil || env[envFingerprint] == "" {
			t.Fatalf("Prepare = %v, %v; want the tree's fingerprint", env, err)
		}
		return env
	}
	env := prepare()
	if env[mg.HashFastEnv] != "" {
		t.Fatalf("with no binary built, Prepare = %v", env)
	}
	// What mage does next: it builds its binary and runs it, which calls
	// Built. Here Built runs in the test binary (os.Executable).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envFingerprint, env[envFingerprint])
	Built()
	t.Cleanup(func() { os.Remove(self + stampSuffix) })
	if !build.Fresh(self+stampSuffix, env[envFingerprint], self) {
		t.Fatalf("Built recorded no fingerprint beside %s", self)
	}
	exe := exeOf(t, dir)
	if err := os.WriteFile(exe, []byte("mage's binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := build.Record(exe+stampSuffix, env[envFingerprint], exe); err != nil {
		t.Fatal(err)
	}
	if env := prepare(); env[mg.HashFastEnv] != "1" {
		t.Fatalf("nothing changed since the binary was built, yet Prepare = %v", env)
	}
	// mage -compile with MAGEFILE_HASHFAST would run the file it is to
	// write, where it exists.
	if env, err := Prepare(context.Background(), ui.New(io.Discard), dir, []string{"-compile", exe}); err != nil || env[mg.HashFastEnv] != "" {
		t.Errorf("for -compile, Prepare = %v, %v; want mage to compile", env, err)
	}

	later := time.Now().Add(time.Minute)
	for _, change := range []struct {
		what string
		do   func() error
	}{
		{"a file touched", func() error { return os.Chtimes(filepath.Join(dir, "dep", "dep.go"), later, later) }},
		{"a file added", func() error {
			return os.WriteFile(filepath.Join(dir, "dep", "more.go"), []byte("package dep\n"), 0o644)
		}},
		{"GOFLAGS set", func() error { t.Setenv("GOFLAGS", "-tags=other"); return nil }},
		{"the binary replaced", func() error { return os.WriteFile(exe, []byte("another"), 0o755) }},
	} {
		// Record the tree as it is, then change it.
		t.Setenv(envFingerprint, prepare()[envFingerprint])
		if err := build.Record(exe+stampSuffix, os.Getenv(envFingerprint), exe); err != nil {
			t.Fatal(err)
		}
		if env := prepare(); env[mg.HashFastEnv] != "1" {
			t.Fatalf("before %s: Prepare = %v", change.what, env)
		}
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		if env := prepare(); env[mg.HashFastEnv] != "" {
			t.Errorf("after %s, Prepare = %v: mage would run a binary that may be stale", change.what, env)
		}
	}
}

// The programs a target runs do not inherit what Prepare set for mage: a
// `go run mage.go` among them, in another tree, must check its own binary.
// A MAGEFILE_HASHFAST of the user's own stays.
func TestBuiltPassesNothingOn(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(self + stampSuffix) })
	t.Setenv(mg.HashFastEnv, "1")
	t.Setenv(envHashFast, "1")
	t.Setenv(envFingerprint, "fp")
	Built()
	for _, name := range []string{mg.HashFastEnv, envHashFast, envFingerprint} {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("after Built, %s=%s", name, v)
		}
	}
	t.Setenv(mg.HashFastEnv, "1")
	Built()
	if os.Getenv(mg.HashFastEnv) != "1" {
		t.Errorf("Built unset the user's own %s", mg.HashFastEnv)
	}
}
