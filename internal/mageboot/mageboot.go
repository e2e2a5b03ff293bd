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

// envFingerprint carries to the mage binary (Built) the Fingerprint of the
// tree as the bootstrap saw it before mage built the binary.
const envFingerprint = "DRALAB_MAGE_FINGERPRINT"

// envHashFast says that Prepare, not the user, set MAGEFILE_HASHFAST.
const envHashFast = "DRALAB_MAGE_HASHFAST"

// stampSuffix names the file beside mage's binary where Built records the
// fingerprint it was built from.
const stampSuffix = ".dralab-fingerprint"

// Prepare readies what mage, given args (its command line), needs to run
// a target of dir's magefiles directory, or to compile the targets, and
// returns the environment mage is to run with.
//
// Where mage has no binary for these magefiles yet (a first run, or the
// magefiles changed), it compiles the packages that the targets import,
// showing Step on u, so that mage finds them compiled. Where the tree has
// not changed since mage built its binary (as Built recorded), the
// environment has MAGEFILE_HASHFAST, so that mage runs it without asking
// the go command whether it is up to date (half a second of hashing every
// source file); either way it has the tree's fingerprint, for Built.
//
// It does nothing when it cannot tell; mage then goes its own way and
// reports what is wrong. An error is a package that does not compile.
func Prepare(ctx context.Context, u *ui.UI, dir string, args []string) (map[string]string, error) {
	run, compileOnly := compiles(args)
	if !run && !compileOnly {
		return nil, nil
	}
	exe, imports, ok := binary(filepath.Join(dir, mage.MagefilesDirName))
	if !ok {
		return nil, nil
	}
	env := map[string]string{}
	if fingerprint, err := build.Fingerprint(ctx, dir); err == nil {
		env[envFingerprint] = fingerprint
		// Not for -compile: mage would run the file it is to write.
		if !compileOnly && build.Fresh(exe+stampSuffix, fingerprint, exe) {
			env[mg.HashFastEnv], env[envHashFast] = "1", "1"
			return env, nil
		}
	}
	if _, err := os.Stat(exe); err == nil {
		return env, nil
	}
	update, done := u.Live(Step)
	err := build.Compile(build.WithReporter(ctx, func(p build.Progress) { update(p.String()) }), dir, imports...)
	done(err)
	return env, err
}

// Built records, beside the running mage binary, the fingerprint the
// bootstrap (Prepare) took before mage built it. Mage runs a binary only
// once it has built it without error, or found it up to date, from the
// tree as it was then or later; a change after the fingerprint was taken
// makes the next fingerprint differ. The magefiles call it as they start.
//
// What Prepare set for this binary's run is not passed on to the programs
// its targets run: a `go run mage.go` among them takes its own.
func Built() {
	fingerprint := os.Getenv(envFingerprint)
	if os.Getenv(envHashFast) != "" {
		os.Unsetenv(mg.HashFastEnv)
	}
	os.Unsetenv(envFingerprint)
	os.Unsetenv(envHashFast)
	if fingerprint == "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	// Without the record mage only takes longer: nothing to report.
	_ = build.Record(exe+stampSuffix, fingerprint, exe)
}

// compiles tells whether mage, given args, compiles the targets: it does
// to run one (run) or to write them as a binary (compileOnly, -compile),
// not to list them, show help or clean its cache. Targets read from
// another directory (-d) are left to mage.
func compiles(args []string) (run, compileOnly bool) {
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
		return false, false
	}
	for _, set := range commands {
		if *set {
			return false, false
		}
	}
	if compileTo != "" {
		return false, true
	}
	return fs.NArg() > 0, false
}

// binary returns where mage keeps its binary for the targets in
// magefiles, found as mage finds its files and names its binary, and
// what the targets import.
func binary(magefiles string) (exe string, imports []string, ok bool) {
	goos, goarch := os.Getenv("GOOS"), os.Getenv("GOARCH")
	files, err := mage.Magefiles(magefiles, goos, goarch, true)
	if err != nil || len(files) == 0 {
		return "", nil, false
	}
	exe, err = mage.ExeName(mg.GoCmd(), mg.CacheDir(), files)
	if err != nil {
		return "", nil, false
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
		return "", nil, false
	}
	return exe, pkg.Imports, true
}
