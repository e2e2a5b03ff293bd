package build

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeFiles writes files under dir, making their directories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The fingerprint changes with every file of the module and of the
// directories its go.mod replaces modules with, and with the Go settings;
// not with .git or the scratch directory .cache.
func TestFingerprintFollowsTheTree(t *testing.T) {
	top := t.TempDir()
	root, outside := filepath.Join(top, "m"), filepath.Join(top, "outside")
	writeFiles(t, root, map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.26\n\nrequire example.com/o v0.0.0\n\nreplace example.com/o => ../outside\n",
		"main.go":       "package main\n\nfunc main() {}\n",
		"sub/embed.txt": "data\n",
	})
	writeFiles(t, outside, map[string]string{"go.mod": "module example.com/o\n\ngo 1.26\n", "o.go": "package o\n"})
	ctx := context.Background()
	fingerprint := func() string {
		t.Helper()
		fp, err := Fingerprint(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	last := fingerprint()
	if again := fingerprint(); again != last {
		t.Fatalf("two fingerprints of one tree differ: %s, %s", last, again)
	}
	later := time.Now().Add(time.Minute)
	for _, c := range []struct {
		what    string
		do      func()
		changes bool
	}{
		{"a file touched", func() { os.Chtimes(filepath.Join(root, "main.go"), later, later) }, true},
		{"a file of a subdirectory rewritten", func() { writeFiles(t, root, map[string]string{"sub/embed.txt": "date\n"}) }, true},
		{"a file added", func() { writeFiles(t, root, map[string]string{"sub/new.go": "package sub\n"}) }, true},
		{"a file removed", func() { os.Remove(filepath.Join(root, "sub", "new.go")) }, true},
		{"a file of the replacement outside the root", func() { writeFiles(t, outside, map[string]string{"o.go": "package o // changed\n"}) }, true},
		{"GOFLAGS set", func() { t.Setenv("GOFLAGS", "-tags=lab") }, true},
		{"a file under .git", func() { writeFiles(t, root, map[string]string{".git/index": "x"}) }, false},
		{"a file under .cache", func() { writeFiles(t, root, map[string]string{".cache/artifacts/log": "x"}) }, false},
	} {
		c.do()
		fp := fingerprint()
		if changed := fp != last; changed != c.changes {
			t.Errorf("%s: fingerprint changed %v, want %v", c.what, changed, c.changes)
		}
		last = fp
	}

	writeFiles(t, top, map[string]string{"go.work": "go 1.26\n\nuse ./m\n"})
	if _, err := Fingerprint(ctx, root); err == nil {
		t.Error("in a workspace, Fingerprint gave one: the workspace's other modules are not in it")
	}
}

// A record holds for the fingerprint it was made with and the outputs as
// they were.
func TestRecordAndFresh(t *testing.T) {
	dir := t.TempDir()
	out, file := filepath.Join(dir, "bin"), filepath.Join(dir, "bin.fingerprint")
	writeFiles(t, dir, map[string]string{"bin": "binary"})
	if Fresh(file, "fp1", out) {
		t.Fatal("fresh with no record")
	}
	if err := Record(file, "fp1", out); err != nil {
		t.Fatal(err)
	}
	if !Fresh(file, "fp1", out) {
		t.Error("not fresh right after its record")
	}
	if Fresh(file, "fp2", out) {
		t.Error("fresh for another fingerprint")
	}
	writeFiles(t, dir, map[string]string{"bin": "another binary"})
	if Fresh(file, "fp1", out) {
		t.Error("fresh with the output replaced")
	}
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	if Fresh(file, "fp1", out) {
		t.Error("fresh with the output gone")
	}
}
