//go:build mage

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/magefile/mage/sh"

	"github.com/dralab/dralab/internal/ui"
)

// defaultFuzzTime is how long test:fuzz runs each target unless FUZZTIME
// says otherwise: enough in CI to run every seed and some thousands of
// mutations.
const defaultFuzzTime = "5s"

// Fuzz runs every fuzz target of the repository (each func FuzzX in a
// _test.go file) for $FUZZTIME each (default 5s; FUZZTIME=10m for a
// longer hunt), one after the other, on $FUZZPARALLEL workers (default 2;
// 1 leaves a core of a two-core machine free during a long hunt). A failure
// leaves its input in the package's testdata/fuzz/FuzzX, where go test
// runs it as a seed from then on: commit it with the fix. docs/robustness.md
// says what each target checks.
func (Test) Fuzz(ctx context.Context) error {
	fuzzTime := os.Getenv("FUZZTIME")
	if fuzzTime == "" {
		fuzzTime = defaultFuzzTime
	}
	parallel := os.Getenv("FUZZPARALLEL")
	if parallel == "" {
		parallel = "2"
	}
	if n, err := strconv.Atoi(parallel); err != nil || n < 1 {
		return fmt.Errorf("FUZZPARALLEL=%s: want a number of workers, 1 or more", parallel)
	}
	targets, err := fuzzTargets(".")
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return errors.New("no fuzz targets found")
	}
	var failed []string
	for _, t := range targets {
		ui.Stderr().Println(fmt.Sprintf("Fuzzing %s in %s for %s", t.name, filepath.Join(t.module, t.pkg), fuzzTime))
		if err := runFuzzTarget(ctx, t, fuzzTime, parallel); err != nil {
			ui.Stderr().Println(fmt.Sprintf("%s in %s: %v", t.name, t.pkg, err))
			failed = append(failed, t.name+" ("+filepath.Join(t.module, t.pkg)+")")
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("fuzz targets failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// fuzzTarget is a fuzz function, the package ("./lab/config") it is in,
// and the folder of the module the package is named from.
type fuzzTarget struct {
	module, pkg, name string
}

// fuzzTargets finds the fuzz functions of the module under root by parsing
// its test files, without compiling them: func FuzzX(f *testing.F). It
// skips testdata and hidden folders, as go does.
func fuzzTargets(root string) ([]fuzzTarget, error) {
	var out []fuzzTarget
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Fuzz") && isFuzzSignature(fn.Type) {
				module := moduleOf(root, filepath.Dir(path))
				rel, err := filepath.Rel(module, filepath.Dir(path))
				if err != nil {
					return err
				}
				out = append(out, fuzzTarget{module: module, pkg: "./" + filepath.ToSlash(rel), name: fn.Name.Name})
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b fuzzTarget) int {
		return strings.Compare(a.module+" "+a.pkg+" "+a.name, b.module+" "+b.pkg+" "+b.name)
	})
	return out, err
}

// moduleOf is the folder of the module dir is in: the nearest folder up to
// root with a go.mod.
func moduleOf(root, dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == root || d == "." || d == string(filepath.Separator) {
			return d
		}
	}
}

// isFuzzSignature tells func(f *testing.F) from a helper named Fuzz….
func isFuzzSignature(t *ast.FuncType) bool {
	if t.Results != nil || len(t.Params.List) != 1 || len(t.Params.List[0].Names) > 1 {
		return false
	}
	star, ok := t.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "F"
}

// runFuzzTarget fuzzes one target. Go's fuzzing coordinator can fail a
// run whose -fuzztime ends while a worker is busy, with "context deadline
// exceeded" and no failing input (go.dev/issue/75804, fixed in Go 1.27):
// such a run counts as passed. A failing input is always written to
// testdata/fuzz, and its run fails.
func runFuzzTarget(ctx context.Context, t fuzzTarget, fuzzTime, parallel string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "test", noVet, "-run", "^$", "-fuzz", "^"+t.name+"$", "-fuzztime", fuzzTime,
		"-fuzzminimizetime", "10s", "-parallel", parallel, t.pkg)
	cmd.Dir = t.module
	// One writer for both streams: exec copies them in one goroutine, so
	// out is never written from two at once.
	w := io.MultiWriter(os.Stdout, &out)
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	if err != nil && coordinatorDeadline(out.String()) {
		ui.Stderr().Println("The run ended with Go's fuzzing deadline race (go.dev/issue/75804), not a failing input: passed.")
		return nil
	}
	return err
}

// coordinatorDeadline tells whether go test's output is that of a fuzz run
// whose one failure is the coordinator's "context deadline exceeded".
func coordinatorDeadline(output string) bool {
	return strings.Contains(output, "\n    context deadline exceeded\n") &&
		!strings.Contains(output, "Failing input written to") &&
		strings.Count(output, "--- FAIL:") == 1
}

// raceOnly are the packages with concurrency of their own whose every
// test runs in test:race's -short run: the driver kit (gRPC servers,
// health streams, concurrent prepares; its tests also run the conformance
// sanity layer, which prepares in parallel and restarts drivers, against
// kit drivers), the scenario runner and the lab's process supervisor
// (internal/labserver, which restarts the nodes' and drivers' processes).
// test:all leaves them out of its plain run: it would run the same tests
// again, without the race detector.
var raceOnly = []string{
	"./drivers/kit/...",
	"./scenarios/...",
	"./internal/labserver/...",
}

// racePackages are the packages test:race runs under the race detector:
// raceOnly, and the dashboard (informers and server-sent events), whose
// Chromium tests -short leaves to test:all's plain run.
var racePackages = append(slices.Clone(raceOnly), "./internal/dashboard/...")

// Race runs the tests of the packages with concurrency of their own under
// the race detector (go test -race -short): drivers/kit (with the
// conformance sanity layer run against its drivers), scenarios, the dashboard and the lab's process supervisor
// (internal/labserver). None of their tests needs a running lab; -short
// leaves out the dashboard's Chromium tests, which would take minutes
// under -race and run without it in test:all.
func (Test) Race() error {
	return sh.RunV("go", append([]string{"test", noVet, "-race", "-short", "-count=1"}, racePackages...)...)
}
