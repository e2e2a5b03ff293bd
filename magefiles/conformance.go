//go:build mage

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/ui"
)

// Conformance runs the DRA driver conformance suite for a driver manifest.
type Conformance mg.Namespace

// Run runs both layers (kubelet-plugin sanity and cluster features) for the
// driver of a manifest, e.g. drivers/fakegpu/driver.yaml, on an embedded
// lab of $DRALAB_CONFIG (or the default lab) that it starts and deletes;
// with $KUBECONFIG set, on that cluster when it is a dralab lab or
// $DRALAB_TARGET names its context, else it refuses. It prints the target
// first, then a summary, and writes JUnit XML and an HTML report to
// $ARTIFACTS (or the working directory).
func (Conformance) Run(ctx context.Context, manifest string) error {
	return runConformance(ctx, manifest, conformance.LayerAll)
}

// Sanity runs layer 1 only: the kubelet-plugin gRPC checks on one node of
// an embedded lab.
func (Conformance) Sanity(ctx context.Context, manifest string) error {
	return runConformance(ctx, manifest, conformance.LayerSanity)
}

func runConformance(ctx context.Context, manifest, layer string) error {
	o := conformance.Options{
		Manifest: manifest, Layer: layer,
		Kubeconfig: os.Getenv("KUBECONFIG"), Target: os.Getenv(target.EnvConsent), LabConfig: os.Getenv("DRALAB_CONFIG"),
		Lab: labstate.LabOf,
	}
	where, err := conformance.Where(o)
	if err != nil {
		return err
	}
	u := ui.Stderr()
	u.Println("Target: " + where)
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
	o.JUnit = filepath.Join(dir, "junit-conformance-"+name+".xml")
	o.Env = []string{build.EnvBinary + "=" + bin}
	if os.Getenv("CI") != "" || mg.Verbose() {
		o.Log = os.Stderr
	}
	done := u.Step("Running the conformance suite of " + manifest)
	report, err := conformance.Run(ctx, o)
	if err == nil && report.Failed() {
		err = fmt.Errorf("the driver fails conformance checks")
	}
	done(err)
	if report != nil {
		fmt.Println(report.Summary())
		fmt.Println("JUnit:", o.JUnit)
		page := filepath.Join(dir, "conformance-"+name+".html")
		if herr := dashboard.WriteReportFile(page, dashboard.TestReport("dralab conformance: "+manifest, report, nil)); herr != nil {
			return errors.Join(err, herr)
		}
		fmt.Println("Report:", page)
	}
	return err
}
