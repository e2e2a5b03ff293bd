//go:build mage

package main

import (
	"context"
	"os"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/target"
	"github.com/dralab/dralab/internal/ui"
)

// Test runs the test tiers.
type Test mg.Namespace

// Unit runs the hermetic unit tests (go test -short): seconds, no lab.
func (Test) Unit() error {
	return sh.RunV("go", "test", "-short", "./...")
}

// E2E runs the e2e suite (every scenario, the driver and lab features) on
// an embedded lab it starts and deletes; with KUBECONFIG set, on that
// cluster when it is a dralab lab or DRALAB_TARGET names its context, else
// it refuses. It prints the target first.
func (Test) E2E(ctx context.Context) error {
	t, err := target.Resolve(target.Request{Kubeconfig: os.Getenv("KUBECONFIG"), Consent: os.Getenv(target.EnvConsent)})
	if err != nil {
		return err
	}
	ui.Stderr().Println("Target: " + t.String())
	bin, err := buildDralab(ctx)
	if err != nil {
		return err
	}
	args := []string{"test", "-count=1", "-timeout=30m", "-v", "./e2e"}
	if t != nil {
		args = append(args, "-args", "--kubeconfig="+t.Kubeconfig)
	}
	return sh.RunWithV(map[string]string{build.EnvBinary: bin}, "go", args...)
}

// All installs the real node's host packages and Chromium (for the
// dashboard's browser tests), builds the dralab binary
// once, then runs every test: the race detector's (test:race), every fuzz
// target for a few seconds (test:fuzz), then unit, integration (each
// starts its own embedded lab, one with a real node) and e2e. This is what
// CI runs.
func (Test) All(ctx context.Context) error {
	mg.SerialDeps(Deps.Build, Deps.Realnode, Deps.Browser)
	bin, err := buildDralab(ctx)
	if err != nil {
		return err
	}
	if err := sh.RunV("go", "vet", "./..."); err != nil {
		return err
	}
	if err := (Test{}).Race(); err != nil {
		return err
	}
	if err := (Test{}).Fuzz(ctx); err != nil {
		return err
	}
	env := map[string]string{build.EnvBinary: bin}
	args := []string{"test", "-count=1", "-timeout=60m"}
	if os.Getenv("CI") != "" {
		args = append(args, "-v")
	}
	return sh.RunWithV(env, "go", append(args, "./...")...)
}

// buildDralab builds the dralab and driver binaries, showing the step.
func buildDralab(ctx context.Context) (string, error) {
	done := ui.Stderr().Step("Building dralab (the first build compiles Kubernetes: 15–25 min on 2 cores)")
	bin, err := build.Dralab(ctx)
	done(err)
	return bin, err
}
