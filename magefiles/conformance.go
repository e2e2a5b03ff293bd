//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
)

// Conformance runs the DRA driver conformance suite for a driver manifest.
type Conformance mg.Namespace

// Run runs both layers (kubelet-plugin sanity and cluster features) for the
// driver of a manifest, e.g. drivers/fakegpu/driver.yaml: against
// $KUBECONFIG when set, else on an embedded lab of $DRALAB_CONFIG (or the
// default lab) that it starts and deletes. It prints a summary and writes
// JUnit XML to $ARTIFACTS (or the working directory).
func (Conformance) Run(ctx context.Context, manifest string) error {
	return runConformance(ctx, manifest, conformance.LayerAll)
}

// Sanity runs layer 1 only: the kubelet-plugin gRPC checks on one node of
// an embedded lab.
func (Conformance) Sanity(ctx context.Context, manifest string) error {
	return runConformance(ctx, manifest, conformance.LayerSanity)
}

func runConformance(ctx context.Context, manifest, layer string) error {
	bin, err := buildDralab(ctx)
	if err != nil {
		return err
	}
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := strings.TrimSuffix(filepath.Base(filepath.Dir(manifest))+"-"+filepath.Base(manifest), ".yaml")
	junitFile := filepath.Join(dir, "junit-conformance-"+name+".xml")
	o := conformance.Options{
		Manifest: manifest, Layer: layer, JUnit: junitFile,
		Kubeconfig: os.Getenv("KUBECONFIG"), LabConfig: os.Getenv("DRALAB_CONFIG"),
		Env: []string{build.EnvBinary + "=" + bin},
	}
	if os.Getenv("CI") != "" || mg.Verbose() {
		o.Log = os.Stderr
	}
	where := "an embedded lab it starts"
	if o.Kubeconfig != "" {
		where = o.Kubeconfig
	}
	done := ui.Stderr().Step(fmt.Sprintf("Running the conformance suite of %s on %s", manifest, where))
	report, err := conformance.Run(ctx, o)
	if err == nil && report.Failed() {
		err = fmt.Errorf("the driver fails conformance checks")
	}
	done(err)
	if report != nil {
		fmt.Println(report.Summary())
		fmt.Println("JUnit:", junitFile)
	}
	return err
}
