// Package conformance runs dralab's DRA driver conformance suite (package
// drivers/conformance) under go test: the kubelet-plugin sanity checks
// (layer 1) on the busiest node of an embedded lab, and the cluster
// features (layer 2), for the driver a manifest describes, each check a
// subtest.
//
//	go test ./e2e/conformance -args --manifest=driver.yaml [--lab-config=lab.yaml | --kubeconfig=...]
//
// Without --kubeconfig the suite starts an embedded lab from --lab-config
// (default: the default lab with a MIG node, a shared node and a
// fabric-attached node) in a temporary state directory and deletes it
// afterwards. A --kubeconfig that is not a dralab lab's is used only when
// DRALAB_TARGET names its context and server; else the suite refuses to start.
// `go run mage.go conformance:run` runs the same suite in-process, with a
// summary, JUnit XML and an HTML report. `go test -short` runs none of it.
package conformance

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab/config"
)

// defaultManifest is the fake driver's: every capability enabled.
const defaultManifest = "../../drivers/fakegpu/driver.yaml"

var (
	manifestFile = flag.String("manifest", defaultManifest, "the driver's conformance manifest")
	labConfig    = flag.String("lab-config", "", "lab configuration of the embedded lab the suite starts without --kubeconfig (default: the default lab with a MIG node, a shared node and a fabric-attached node)")
	kubeconfig   = flag.String("kubeconfig", "", "the cluster to run on: a dralab lab's kubeconfig, or any whose context and server DRALAB_TARGET names (context@server)")
	image        = flag.String("image", "", "image of the proof containers (default: busybox:1.37; the embedded lab's own busybox there)")
)

// TestConformance runs both layers and makes each check a subtest: a
// failed check fails its subtest with its message and what it saw, a
// skipped one is skipped with the reason. The fake driver's manifest
// enables every capability, and the lab the suite starts for it has a
// device for each: there no check may be skipped.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite needs a cluster: run without -short")
	}
	var labCfg *config.Config
	if *labConfig != "" {
		var err error
		if labCfg, err = config.Load(*labConfig); err != nil {
			t.Fatal(err)
		}
	}
	o := conformance.Options{Manifest: *manifestFile, Kubeconfig: *kubeconfig, Target: os.Getenv(target.EnvConsent)}
	o.Cluster.Image = *image
	report, err := scratchlab.Conformance(context.Background(), o, labCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range report.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Output != "" {
				t.Log(c.Output)
			}
			switch c.Status {
			case results.Failed:
				t.Error(c.Message)
			case results.Skipped:
				t.Skip(c.Message)
			}
		})
	}
	t.Logf("\n%s", report.Summary())
	if *manifestFile == defaultManifest && *kubeconfig == "" && *labConfig == "" {
		var skipped []string
		for _, c := range report.Cases {
			if c.Status != results.Passed {
				skipped = append(skipped, c.Name+" ("+string(c.Status)+")")
			}
		}
		m, err := manifest.Load(*manifestFile)
		if err != nil {
			t.Fatal(err)
		}
		want := len(sanity.Checks()) + len(cluster.Features(m, cluster.Options{}))
		if len(skipped) > 0 || len(report.Cases) != want {
			t.Errorf("the fake driver's full manifest on the conformance lab: %d checks of %d, not passed: %v; want every check run and passed", len(report.Cases), want, skipped)
		}
	}
}
