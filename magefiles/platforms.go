//go:build mage

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/childproc"
	"github.com/dralab/dralab/internal/ui"
)

// commands are every command of the repository, by module.
var commands = map[string][]string{
	".":                   {"./cmd/dralab", "./cmd/" + build.DriverBinary, "./" + strings.TrimPrefix(build.KindPackage, "github.com/dralab/dralab/")},
	"drivers/conformance": {"./cmd/dralab-conformance", "./cmd/kubectl-dra"},
}

// Platforms cross-compiles every command (dralab, dralab-driver,
// dralab-kind, dralab-conformance, kubectl-dra) for linux/arm64 (with cgo,
// through Debian's aarch64 C compiler: deps:cross) and darwin/arm64,
// without optimisation (checkGCFlags), and checks each binary's header
// names its platform. It runs nothing it builds.
func (Test) Platforms(ctx context.Context) error {
	mg.Deps(Deps.Cross)
	return crossBuild(ctx, ui.Stderr(), nil)
}

// checkGCFlags are the compiler's flags of the cross-builds, which check
// that every command compiles and links for the platform and never run
// what they build: no optimisation, no inlining, no DWARF. Their packages
// are compiled for no other build, so nothing else loses a cached result;
// a cold build of darwin/arm64's dralab-kind took 401 s of CPU with them
// (user and system), 566 s without (2026-12-06, 2 cores).
const checkGCFlags = "all=-N -l -dwarf=false"

// crossBuild builds every command for each of build.CrossPlatforms into a
// temporary directory, with prefix (a command and its arguments, such as
// nice) before each go build, and says on u what it built.
func crossBuild(ctx context.Context, u *ui.UI, prefix []string) error {
	out, err := os.MkdirTemp("", "dralab-platforms-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	for _, pl := range build.CrossPlatforms {
		dir := filepath.Join(out, pl.OS+"-"+pl.Arch)
		start := time.Now()
		done := u.Step(fmt.Sprintf("Building every command for %s (a first build compiles Kubernetes for it: minutes)", pl))
		var built []string
		err := func() error {
			for _, mod := range modules {
				args := slices.Concat(prefix, []string{"go", "build", "-gcflags", checkGCFlags, "-ldflags", build.LDFlags(), "-o", dir + string(filepath.Separator)}, commands[mod])
				cmd := exec.CommandContext(ctx, args[0], args[1:]...)
				cmd.Dir = mod
				cmd.Env = append(os.Environ(), build.CrossEnv(pl)...)
				// In the background of test:all, the build ends with mage,
				// even where mage is killed and its context never ends.
				cmd.SysProcAttr = childproc.Attr()
				if output, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("%s (%s, in %s): %w\n%s", strings.Join(cmd.Args, " "), strings.Join(build.CrossEnv(pl), " "), mod, err, output)
				}
				for _, c := range commands[mod] {
					bin := filepath.Join(dir, filepath.Base(c))
					if err := build.CheckBinary(bin, pl); err != nil {
						return err
					}
					st, err := os.Stat(bin)
					if err != nil {
						return err
					}
					built = append(built, fmt.Sprintf("%s %.0f MB", filepath.Base(c), float64(st.Size())/1e6))
				}
			}
			return nil
		}()
		done(err)
		if err != nil {
			return err
		}
		u.Println(fmt.Sprintf("  %s in %s: %s (unoptimised)", pl, time.Since(start).Round(time.Second), strings.Join(built, ", ")))
	}
	return nil
}

// beside is a mage step run in the background at the lowest CPU priority,
// its lines kept until it is joined.
type beside struct {
	out  bytes.Buffer
	err  error
	done chan struct{}
}

// crossBuildBeside starts the cross-builds of test:platforms beside what
// test:all runs next. Their compiles (half an hour on a cold cache, two
// minutes warm) yield the CPU to the tests (nice 19) and take what the
// tests leave idle: an e2e run mostly waits on its labs.
func crossBuildBeside(ctx context.Context) *beside {
	b := &beside{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.err = crossBuild(ctx, ui.New(&b.out), []string{"nice", "-n", "19"})
	}()
	return b
}

// join waits for the step and prints its lines.
func (b *beside) join(title string) error {
	start := time.Now()
	<-b.done
	u := ui.Stderr()
	u.Println(fmt.Sprintf("%s (in the background; waited %s for it here):", title, time.Since(start).Round(time.Second)))
	_, _ = os.Stderr.Write(b.out.Bytes())
	return b.err
}
