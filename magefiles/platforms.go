//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
)

// commands are every command of the repository, by module.
var commands = map[string][]string{
	".":                   {"./cmd/dralab", "./cmd/" + build.DriverBinary, "./" + strings.TrimPrefix(build.KindPackage, "github.com/dralab/dralab/")},
	"drivers/conformance": {"./cmd/dralab-conformance", "./cmd/kubectl-dra"},
}

// Platforms cross-compiles every command (dralab, dralab-driver,
// dralab-kind, dralab-conformance) for linux/arm64 (with cgo, through Debian's
// aarch64 C compiler: deps:cross) and darwin/arm64, and checks each
// binary's header names its platform. It runs nothing it builds.
func (Test) Platforms(ctx context.Context) error {
	mg.Deps(Deps.Cross)
	out, err := os.MkdirTemp("", "dralab-platforms-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	p := ui.Stderr()
	for _, pl := range build.CrossPlatforms {
		dir := filepath.Join(out, pl.OS+"-"+pl.Arch)
		start := time.Now()
		done := p.Step(fmt.Sprintf("Building every command for %s (a first build compiles Kubernetes for it: minutes)", pl))
		var built []string
		err := func() error {
			for _, mod := range modules {
				cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-ldflags", build.LDFlags(), "-o", dir + string(filepath.Separator)}, commands[mod]...)...)
				cmd.Dir = mod
				cmd.Env = append(os.Environ(), build.CrossEnv(pl)...)
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
		p.Println(fmt.Sprintf("  %s in %s: %s", pl, time.Since(start).Round(time.Second), strings.Join(built, ", ")))
	}
	return nil
}
