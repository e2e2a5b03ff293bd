package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// TypeCheck type-checks the packages that patterns name in the module in
// dir, and every package they import, the standard library's included,
// from source as go build would select and preprocess them for p: its
// build constraints, its files, cgo through p's C compiler (CrossEnv). It
// compiles nothing, so a platform's check costs a type-check of the source
// rather than a compile of every package (a cold cross-build of every
// command took about 58 CPU-minutes for two platforms). It says how many
// packages it checked and which of them, outside the standard library,
// have C code (cgo), which only a compile for p checks; an error lists
// each package's errors.
func TypeCheck(ctx context.Context, dir string, p Platform, patterns ...string) (Checked, error) {
	cfg := &packages.Config{
		Context: ctx,
		Dir:     dir,
		Env:     append(os.Environ(), CrossEnv(p)...),
		// Syntax for every dependency is what makes go/packages check
		// them from source: with types alone it asks go list for export
		// data, which compiles every package.
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedImports |
			packages.NeedDeps | packages.NeedTypes | packages.NeedSyntax | packages.NeedModule,
	}
	var c Checked
	roots, err := packages.Load(cfg, patterns...)
	if err != nil {
		return c, fmt.Errorf("loading %s for %s (in %s): %w", strings.Join(patterns, " "), p, dir, err)
	}
	var errs []string
	packages.Visit(roots, nil, func(pkg *packages.Package) {
		c.Packages++
		for _, e := range pkg.Errors {
			errs = append(errs, fmt.Sprintf("%s: %s", pkg.PkgPath, e))
		}
		// cgo's preprocessing (SWIG's too) compiles files of its own
		// making in place of some the package has.
		if pkg.Module != nil && slices.ContainsFunc(pkg.CompiledGoFiles, func(f string) bool { return !slices.Contains(pkg.GoFiles, f) }) {
			c.Cgo = append(c.Cgo, pkg.PkgPath)
		}
	})
	slices.Sort(c.Cgo)
	if len(errs) > 0 {
		slices.Sort(errs)
		return c, fmt.Errorf("%s for %s (in %s): %d errors:\n%w", strings.Join(patterns, " "), p, dir, len(errs), errors.New(strings.Join(errs, "\n")))
	}
	return c, nil
}

// Checked is what TypeCheck checked: how many packages, and those outside
// the standard library with C code.
type Checked struct {
	Packages int
	Cgo      []string
}
