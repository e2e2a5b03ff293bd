// Package conformance runs dralab's DRA driver conformance suite: the
// kubelet-plugin sanity checks (layer 1, drivers/conformance/sanity) on
// every node of an embedded lab, and the cluster features (layer 2,
// drivers/conformance/cluster) against any cluster, for the driver a
// manifest describes.
//
//	go test ./e2e/conformance -args --manifest=driver.yaml [--lab-config=lab.yaml | --kubeconfig=...]
//
// Without --kubeconfig the suite starts an embedded lab from --lab-config
// (default: the default lab with a MIG node, a shared node and a fabric-attached node) in a temporary state directory and deletes it
// afterwards. A --kubeconfig that is not a dralab lab's is used only when
// DRALAB_TARGET names its context; else the suite refuses to start.
// `go run mage.go conformance:run` wraps it, with a summary and JUnit XML.
// `go test -short` runs none of it.
package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/internal/testlab"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

var (
	manifestFile = flag.String("manifest", "../../drivers/fakegpu/driver.yaml", "the driver's conformance manifest")
	labConfig    = flag.String("lab-config", "", "lab configuration of the embedded lab the suite starts without --kubeconfig (default: the default lab with a MIG node, a shared node and a fabric-attached node)")
	image        = flag.String("image", "", "image of the proof containers (default: busybox:1.37; the embedded lab's own busybox there)")
)

var (
	testenv  env.Environment
	theLab   *lab.Lab
	driver   *manifest.Manifest
	options  cluster.Options
	shortRun = "the conformance suite needs a cluster: run without -short"
)

func TestMain(m *testing.M) {
	cfg, err := envconf.NewFromFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	driver, err = manifest.Load(*manifestFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	options.Image = *image
	testenv = env.NewWithConfig(cfg)
	switch {
	case testing.Short():
	case cfg.KubeconfigFile() == "":
		if options.Image == "" {
			// Imported on a real node; any image "runs" on a hollow one.
			options.Image = realnode.BusyboxImage
		}
		testenv.Setup(startLab).Finish(stopLab)
	default:
		t, err := target.Resolve(target.Request{Kubeconfig: cfg.KubeconfigFile(), Context: cfg.KubeContext(), Consent: os.Getenv(target.EnvConsent), Lab: labstate.LabOf})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "conformance target:", t)
	}
	os.Exit(testenv.Run(m))
}

func startLab(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	load := testlab.ConformanceConfig
	if *labConfig != "" {
		load = func() (*config.Config, error) { return config.Load(*labConfig) }
	}
	labCfg, err := load()
	if err != nil {
		return ctx, err
	}
	l, err := testlab.Start(ctx, labCfg, "dralab-conformance")
	theLab = l
	if err != nil {
		return ctx, err
	}
	cfg.WithKubeconfigFile(l.Kubeconfig())
	// The manifest's health commands act on this lab.
	if options.CommandEnv, err = testlab.CommandEnv(ctx, l); err != nil {
		return ctx, err
	}
	return ctx, nil
}

func stopLab(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	return ctx, testlab.Stop(ctx, theLab)
}

// TestCluster is layer 2: one e2e-framework feature per capability.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip(shortRun)
	}
	testenv.Test(t, cluster.Features(driver, options)...)
}
