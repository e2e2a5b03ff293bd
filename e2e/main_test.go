// Package e2e holds dralab's end-to-end tests, written with
// sigs.k8s.io/e2e-framework. Without --kubeconfig the suite starts its own
// embedded lab (in a temporary state directory, so a lab you are using is
// left alone) and deletes it at the end; with --kubeconfig it runs against
// that cluster, skipping the features that need the embedded lab's host
// paths, when it is a dralab lab or DRALAB_TARGET names its context and server (else
// it refuses to start). `go test -short` runs no e2e feature.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
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
	default:
		t, err := target.Resolve(target.Request{Kubeconfig: cfg.KubeconfigFile(), Context: cfg.KubeContext(), Consent: os.Getenv(target.EnvConsent), Lab: labstate.LabOf})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "e2e target:", t)
	}
	os.Exit(testenv.Run(m))
}

func startEmbeddedLab(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	l, err := scratchlab.Start(ctx, config.Default(), "dralab-e2e")
	theLab = l
	if err != nil {
		return ctx, err
	}
	cfg.WithKubeconfigFile(l.Kubeconfig())
	return ctx, nil
}

func stopEmbeddedLab(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	return ctx, scratchlab.Stop(ctx, theLab)
}

// requireCluster skips a test only when the suite runs no e2e at all (-short).
func requireCluster(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
