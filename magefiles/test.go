//go:build mage

package main

import (
	"context"
	"os"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
)

// Test runs the test tiers.
type Test mg.Namespace

// Unit runs the hermetic unit tests (go test -short): seconds, no lab.
func (Test) Unit() error {
	return sh.RunV("go", "test", "-short", "./...")
}

// All builds the dralab binary once, then runs every test: unit,
// integration (each starts its own embedded lab) and e2e. This is what CI runs.
func (Test) All(ctx context.Context) error {
	u := ui.Stderr()
	done := u.Step("Building dralab (the first build compiles Kubernetes: 15–25 min on 2 cores)")
	bin, err := build.Dralab(ctx)
	done(err)
	if err != nil {
		return err
	}
	if err := sh.RunV("go", "vet", "./..."); err != nil {
		return err
	}
	env := map[string]string{build.EnvBinary: bin}
	args := []string{"test", "-count=1", "-timeout=60m"}
	if os.Getenv("CI") != "" {
		args = append(args, "-v")
	}
	return sh.RunWithV(env, "go", append(args, "./...")...)
}
