package build

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A type-check for a platform sees what go build would for it, in the
// command and in the packages it imports: a symbol the platform's
// standard library lacks, and a file only that platform builds, fail there
// and nowhere else.
func TestTypeCheckSeesThePlatformsCode(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":  "module example.com/tc\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"example.com/tc/lib\"\n\nfunc main() { lib.F() }\n",
		// syscall.Gettid is Linux's only.
		"lib/lib.go": "package lib\n\nimport \"syscall\"\n\nfunc F() { _ = syscall.Gettid }\n",
		// Built on darwin only, and wrong there.
		"lib/mac.go": "//go:build darwin\n\npackage lib\n\nvar macOnly int = \"not an int\"\n",
		// C code where cgo is on (linux, as CrossEnv has it).
		"lib/c_linux.go": "package lib\n\n// static int two(void) { return 2; }\nimport \"C\"\n\nvar Two = int(C.two())\n",
	}
	if err := os.Mkdir(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	c, err := TypeCheck(ctx, dir, Platform{"linux", "amd64"}, ".")
	if err != nil {
		t.Fatalf("linux/amd64: %v", err)
	}
	if c.Packages < 10 {
		t.Errorf("linux/amd64: checked %d packages; the standard library's should be among them", c.Packages)
	}
	// The standard library's cgo (runtime/cgo, net) is not listed.
	if !slices.Equal(c.Cgo, []string{"example.com/tc/lib"}) {
		t.Errorf("linux/amd64: packages with C code %v, want [example.com/tc/lib]", c.Cgo)
	}
	_, err = TypeCheck(ctx, dir, Platform{"darwin", "arm64"}, ".")
	if err == nil {
		t.Fatal("darwin/arm64: no error, though lib uses syscall.Gettid, Linux's, and its mac.go assigns a string to an int")
	}
	for _, want := range []string{"Gettid", "mac.go", "example.com/tc/lib", "darwin/arm64"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("darwin/arm64's error does not name %q:\n%v", want, err)
		}
	}
}
