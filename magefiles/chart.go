//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/magefile/mage/mg"
)

// Chart checks the Helm charts.
type Chart mg.Namespace

// Lint lints charts/dralab-driver with the Helm SDK (helm lint --strict),
// with its default values and with counting-mode values.
func (Chart) Lint(ctx context.Context) error { return harness(ctx, "chart-lint") }

// harness runs a target whose code is heavy to compile in
// internal/harness/cmd/dralab-harness, so that this binary links none of
// it (Helm, plotting): mage compiles every target's imports before it
// runs any, a first lab:up's included.
func harness(ctx context.Context, target string) error {
	cmd := exec.CommandContext(ctx, "go", "run", "./internal/harness/cmd/dralab-harness", target)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	return nil
}
