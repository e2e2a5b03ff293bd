// Package mageboot is what `go run mage.go` does before it hands over to
// mage. The first time, mage compiles every package its targets import
// (the lab, the conformance suite, client-go: about a thousand packages,
// minutes on two cores) and says nothing while it does. Prepare compiles
// them first, on a line that tells how far it has come, and mage then
// finds them in the Go build cache.
package mageboot

import (
	"context"
	"flag"
	gobuild "go/build"
	"io"
	"os"
	"path/filepath"

	"github.com/magefile/mage/mage"
	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
)

// Step is the line Prepare shows while it compiles.
const Step = "Preparing the mage targets"

// Prepare compiles the packages that the mage targets in dir's magefiles
// directory import, showing Step on u, when args (mage's command line)
// run a target or compile the targets and mage has no binary for these
// magefiles yet: on a first run, or after the magefiles changed. It does
// nothing when it cannot tell; mage then goes its own way and reports
// what is wrong. An error is a package that does not compile.
func Prepare(ctx context.Context, u *ui.UI, dir string, args []string) error {
	if !compiles(args) {
		return nil
	}
	imports := pending(filepath.Join(dir, mage.MagefilesDirName))
	if len(imports) == 0 {
		return nil
	}
	update, done := u.Live(Step)
	err := build.Compile(build.WithReporter(ctx, func(p build.Progress) { update(p.String()) }), dir, imports...)
	done(err)
	return err
}

// compiles tells whether mage, given args, compiles the targets: it does
// to run one or to write them as a binary (-compile), not to list them,
// show help or clean its cache. Targets read from another directory (-d)
// are left to mage.
func compiles(args []string) bool {
	fs := flag.NewFlagSet("mage", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var compileTo, dir string
	fs.StringVar(&compileTo, "compile", "", "")
	fs.StringVar(&dir, "d", "", "")
	for _, name := range []string{"w", "gocmd", "goos", "goarch", "ldflags", "install", "t"} {
		fs.String(name, "", "")
	}
	commands := map[string]*bool{}
	for _, name := range []string{"l", "h", "version", "init", "clean", "autocomplete"} {
		commands[name] = fs.Bool(name, false, "")
	}
	for _, name := range []string{"f", "debug", "v", "multiline", "keep"} {
		fs.Bool(name, false, "")
	}
	if err := fs.Parse(args); err != nil || dir != "" {
		return false
	}
	for _, set := range commands {
		if *set {
			return false
		}
	}
	return compileTo != "" || fs.NArg() > 0
}

// pending returns what the mage targets in magefiles import when mage has
// no binary for them, found as mage finds its files and names its binary.
func pending(magefiles string) []string {
	goos, goarch := os.Getenv("GOOS"), os.Getenv("GOARCH")
	files, err := mage.Magefiles(magefiles, goos, goarch, true)
	if err != nil || len(files) == 0 {
		return nil
	}
	exe, err := mage.ExeName(mg.GoCmd(), mg.CacheDir(), files)
	if err != nil {
		return nil
	}
	if _, err := os.Stat(exe); err == nil {
		return nil
	}
	ctx := gobuild.Default
	ctx.BuildTags = []string{"mage"}
	if goos != "" {
		ctx.GOOS = goos
	}
	if goarch != "" {
		ctx.GOARCH = goarch
	}
	pkg, err := ctx.ImportDir(magefiles, 0)
	if err != nil {
		return nil
	}
	return pkg.Imports
}
