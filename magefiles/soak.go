//go:build mage

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dralab/dralab/internal/harness/soak"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// defaultSoak is how long soak churns unless SOAK says otherwise; CI's
// test:all runs ciSoak.
const (
	defaultSoak = 2 * time.Minute
	ciSoak      = time.Minute
)

// Soak runs the chaos soak for $SOAK (default 2m; SOAK=30m for longer) on
// a fresh embedded lab of lab/examples/soak.yaml, or of $DRALAB_CONFIG: it
// churns pods and claims of every kind the lab's GPUs serve while it kills
// GPU drivers, kubelets, a real node's containerd and the lab process
// (then lab:up resumes it) and fails and heals GPUs, checks invariants all
// along and after a final settle, and after lab:down checks that nothing
// of the lab remains. It prints the faults, the churn, the checks and every
// violation, writes soak.json into $ARTIFACTS, and fails on any violation.
// SOAK_SEED=<n> repeats a run's choices.
func Soak(ctx context.Context) error {
	d := defaultSoak
	if v := os.Getenv("SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			return fmt.Errorf("SOAK=%s: want a positive duration such as 2m or 30m", v)
		}
	}
	return runSoak(ctx, d)
}

func runSoak(ctx context.Context, d time.Duration) error {
	o := soak.Options{Duration: d}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil || seed == 0 {
			return fmt.Errorf("SOAK_SEED=%s: want a positive integer", v)
		}
		o.Seed = seed
	}
	const example = "soak.yaml"
	source := config.ExamplePath(example)
	var err error
	if f := os.Getenv(lab.EnvConfig); f != "" {
		source = f
		o.Config, err = config.Load(f)
	} else {
		o.Config, err = config.Example(example)
	}
	if err != nil {
		return err
	}
	if o.Binary, err = buildDralab(ctx); err != nil {
		return err
	}
	u := ui.Stderr()
	o.Progress = u.Step
	u.Println(fmt.Sprintf("Soak: %s on a lab of %s", d, source))
	rep, runErr := soak.Run(ctx, o)
	if err := soak.WriteSummary(os.Stdout, rep); err != nil {
		return errors.Join(runErr, err)
	}
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		file := filepath.Join(dir, "soak.json")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return errors.Join(runErr, err)
		}
		if err := soak.WriteJSON(file, rep); err != nil {
			return errors.Join(runErr, err)
		}
		u.Println("Report: " + file)
	}
	return runErr
}
