//go:build mage

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
)

// Conformance runs the DRA driver conformance suite for a driver manifest.
type Conformance mg.Namespace

// Run runs both layers (kubelet-plugin sanity and cluster features) for the
// driver of a manifest, e.g. drivers/fakegpu/driver.yaml, or for several
// drivers of the same nodes together, their manifests separated by commas
// (drivers/fakegpu/driver.yaml,drivers/fakenic/driver.yaml: a check is
// then skipped only when no manifest enables it), on an embedded
// lab of $DRALAB_CONFIG (or the conformance lab: the default lab plus a
// MIG, a shared and a fabric-attached node and three NIC nodes) that it
// starts and deletes;
// with $KUBECONFIG set, on that cluster when it is a dralab lab or
// $DRALAB_TARGET names its context and server, else it refuses. A lab of this machine
// that lacks the GPUs the manifest's capabilities need (the default lab)
// is passed over for the conformance lab, saying so. It prints the target
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

func runConformance(ctx context.Context, manifests, layer string) error {
	files := strings.Split(manifests, ",")
	manifestFile := files[0]
	o := conformance.Options{
		Manifest: manifestFile, Together: files[1:], Layer: layer,
		Kubeconfig: os.Getenv("KUBECONFIG"), Target: os.Getenv(target.EnvConsent), Lab: labstate.LabOf,
	}
	where, err := conformance.Where(o)
	if err != nil {
		return err
	}
	u := ui.Stderr()
	instead := false
	if o.Kubeconfig != "" {
		// A lab of this machine without the devices the manifest's
		// capabilities need (README's default lab for the fake driver's
		// full manifest) cannot pass: run on the lab that has them.
		var ms []*manifest.Manifest
		for _, file := range files {
			m, err := manifest.Load(file)
			if err != nil {
				return err
			}
			ms = append(ms, m)
		}
		t, err := target.Resolve(target.Request{Kubeconfig: o.Kubeconfig, Consent: o.Target, Lab: labstate.LabOf})
		if err != nil {
			return err
		}
		if t.LabDir != "" {
			cfg, err := config.Load(labstate.Dir(t.LabDir).Config())
			if err != nil {
				return err
			}
			var lacks []string
			for _, m := range ms {
				lacks = append(lacks, scratchlab.Lacks(cfg, m)...)
			}
			if len(lacks) > 0 {
				u.Println(fmt.Sprintf("The lab in %s lacks %s: running on the conformance lab instead, started and deleted for this run (unset KUBECONFIG to ask for it)", t.LabDir, strings.Join(lacks, ", ")))
				o.Kubeconfig, where, instead = "", (*target.Target)(nil).String(), true
			}
		}
	}
	var labCfg *config.Config
	if o.Kubeconfig == "" && !instead {
		if file := os.Getenv("DRALAB_CONFIG"); file != "" {
			if labCfg, err = config.Load(file); err != nil {
				return err
			}
		}
	}
	u.Println("Target: " + where)
	if o.Kubeconfig == "" {
		// The lab runs the dralab binary of this checkout.
		bin, err := buildDralab(ctx)
		if err != nil {
			return err
		}
		os.Setenv(build.EnvBinary, bin)
	}
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var names []string
	for _, file := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(filepath.Dir(file))+"-"+filepath.Base(file), ".yaml"))
	}
	name := strings.Join(names, "+")
	o.JUnit = filepath.Join(dir, "junit-conformance-"+name+".xml")
	o.OnCase = func(c results.Case) {
		u.Println(fmt.Sprintf("  %s %s (%s)", c.Status, c.Name, c.Elapsed.Round(100*time.Millisecond)))
	}
	done := u.Step("Running the conformance suite of " + strings.Join(files, " and "))
	report, err := scratchlab.Conformance(ctx, o, labCfg)
	if err == nil && report.Failed() {
		err = fmt.Errorf("the driver fails conformance checks")
	}
	done(err)
	if report != nil {
		fmt.Println(report.Summary())
		fmt.Println("JUnit:", o.JUnit)
		page := filepath.Join(dir, "conformance-"+name+".html")
		if herr := report.WriteHTMLFile(page, "dralab conformance: "+strings.Join(files, " + "), nil); herr != nil {
			return errors.Join(err, herr)
		}
		fmt.Println("Report:", page)
	}
	return err
}
