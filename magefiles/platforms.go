//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

// Platforms checks every command (dralab, dralab-driver, dralab-kind,
// dralab-conformance, kubectl-dra) for linux/arm64 and darwin/arm64: each
// command and every package it imports is type-checked from source as go
// build selects it for the platform (its build constraints and files, cgo
// preprocessed through Debian's aarch64 C compiler: deps:cross), and on
// linux/arm64 the cgo packages (NVML's) are compiled and linked by that C
// compiler. It compiles no other package and runs nothing: where the
// commands' code differs per platform is in the files each selects, which
// the type-check reads whole (a cold compile of every command for both took
// about 58 CPU-minutes).
func (Test) Platforms(ctx context.Context) error {
	mg.Deps(Deps.Cross)
	return crossCheck(ctx, ui.Stderr())
}

// crossCheck checks every command for each of build.CrossPlatforms and
// says on u what it checked. The packages the type-check finds with C code
// (go-nvml's, which the GPU driver's NVML inventory calls) it compiles for
// the platform through its C compiler, which cgo also uses to link a
// program of their imports.
func crossCheck(ctx context.Context, u *ui.UI) error {
	for _, pl := range build.CrossPlatforms {
		start := time.Now()
		done := u.Step(fmt.Sprintf("Type-checking every command for %s", pl))
		var checked []string
		err := func() error {
			for _, mod := range modules {
				c, err := build.TypeCheck(ctx, mod, pl, commands[mod]...)
				if err != nil {
					return err
				}
				checked = append(checked, fmt.Sprintf("%d packages in %s", c.Packages, mod))
				if len(c.Cgo) == 0 {
					continue
				}
				cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, c.Cgo...)...)
				cmd.Dir = mod
				cmd.Env = append(os.Environ(), build.CrossEnv(pl)...)
				if output, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("%s (%s, in %s): %w\n%s", strings.Join(cmd.Args, " "), strings.Join(build.CrossEnv(pl), " "), mod, err, output)
				}
				checked = append(checked, "cgo compiled: "+strings.Join(c.Cgo, ", "))
			}
			return nil
		}()
		done(err)
		if err != nil {
			return err
		}
		u.Println(fmt.Sprintf("  %s in %s: %s", pl, time.Since(start).Round(time.Second), strings.Join(checked, "; ")))
	}
	return nil
}
