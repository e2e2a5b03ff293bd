// Package e2e holds dralab's end-to-end tests, written with
// sigs.k8s.io/e2e-framework. Without --kubeconfig the suite starts its own
// embedded lab (in a temporary state directory, so a lab you are using is
// left alone) and deletes it at the end; with --kubeconfig it runs against
// that cluster, skipping the features that need the embedded lab's host
// paths. `go test -short` runs no e2e feature.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

var (
	testenv env.Environment
	// theLab is the embedded lab the suite started, nil when it runs
	// against a given kubeconfig or in -short mode.
	theLab *lab.Lab
	// skipReason says why e2e features do not run, when they do not.
	skipReason string
)

func TestMain(m *testing.M) {
	cfg, err := envconf.NewFromFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testenv = env.NewWithConfig(cfg)
	switch {
	case testing.Short():
		skipReason = "e2e needs a cluster: run without -short"
	case cfg.KubeconfigFile() == "":
		testenv.Setup(startEmbeddedLab).Finish(stopEmbeddedLab)
	}
	os.Exit(testenv.Run(m))
}

// e2eLabConfig is the default topology under its own name, so that the
// suite never touches a lab a person started.
func e2eLabConfig() *config.Config {
	cfg := config.Default()
	cfg.Name = "dralab-e2e"
	return cfg
}

func startEmbeddedLab(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	bin, err := build.Dralab(ctx)
	if err != nil {
		return ctx, err
	}
	root, err := os.MkdirTemp("", "dralab-e2e-")
	if err != nil {
		return ctx, err
	}
	l, err := lab.New(lab.WithConfig(e2eLabConfig()), lab.WithStateRoot(root), lab.WithBinary(bin), lab.WithRetain(true))
	if err != nil {
		return ctx, err
	}
	theLab = l
	if _, err := l.Up(ctx); err != nil {
		return ctx, fmt.Errorf("starting the e2e lab: %w", err)
	}
	cfg.WithKubeconfigFile(l.Kubeconfig())
	return ctx, nil
}

func stopEmbeddedLab(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	if theLab == nil {
		return ctx, nil
	}
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		_ = theLab.CollectLogs(ctx, filepath.Join(dir, "lab-logs"))
	}
	st, _ := theLab.Status(ctx)
	err := theLab.Down(ctx)
	if st != nil {
		_ = os.RemoveAll(filepath.Dir(st.StateDir))
	}
	return ctx, err
}

// requireCluster skips a test only when the suite runs no e2e at all (-short).
func requireCluster(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
