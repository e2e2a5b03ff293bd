// Package conformance runs dralab's DRA driver conformance suite (package
// drivers/conformance) under go test: the kubelet-plugin sanity checks
// (layer 1) on the busiest node of an embedded lab, and the cluster
// features (layer 2), for the driver a manifest describes, each check a
// subtest.
//
//	go test ./e2e/conformance -args --manifest=driver.yaml [--together=other.yaml] [--lab-config=lab.yaml | --kubeconfig=...]
//
// By default it checks dralab's two drivers together, the fake GPU
// driver's manifest and the NIC driver's (--together). Without
// --kubeconfig the suite starts an embedded lab from --lab-config
// (default: the conformance lab, the default lab with a MIG node, a shared
// node, a fabric-attached node and three NIC nodes) in a temporary state
// directory and deletes it afterwards. A --kubeconfig that is not a dralab lab's is used only when
// DRALAB_TARGET names its context and server; else the suite refuses to start.
// `go run mage.go conformance:run` runs the same suite in-process, with a
// summary, JUnit XML and an HTML report. `go test -short` runs none of it.
package conformance

import (
	"context"
	"flag"
	"os"
	"slices"
	"strings"
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

// defaultManifest is the fake GPU driver's, defaultTogether the NIC
// driver's: between them, every capability is enabled.
const (
	defaultManifest = "../../drivers/fakegpu/driver.yaml"
	defaultTogether = "../../drivers/fakenic/driver.yaml"
)

var (
	manifestFile = flag.String("manifest", defaultManifest, "the driver's conformance manifest")
	together     = flag.String("together", defaultTogether, "the manifests of more drivers of the same nodes, checked in the same run, separated by commas; empty: none")
	labConfig    = flag.String("lab-config", "", "lab configuration of the embedded lab the suite starts without --kubeconfig (default: the default lab with a MIG node, a shared node and a fabric-attached node)")
	kubeconfig   = flag.String("kubeconfig", "", "the cluster to run on: a dralab lab's kubeconfig, or any whose context and server DRALAB_TARGET names (context@server)")
	image        = flag.String("image", "", "image of the proof containers (default: busybox:1.37; the embedded lab's own busybox there)")
)

// TestConformance runs both layers and makes each check a subtest: a
// failed check fails its subtest with its message and what it saw, a
// skipped one is skipped with the reason. By default it checks the fake
// GPU driver and the NIC driver together: between them their manifests
// enable every capability, and the lab the suite starts for them has a
// device for each, so no check may be skipped and every feature must pass
// for a driver that enables it.
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
	if *together != "" {
		o.Together = strings.Split(*together, ",")
	}
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
	if *manifestFile == defaultManifest && *together == defaultTogether && *kubeconfig == "" && *labConfig == "" {
		var notPassed []string
		passed := map[string]bool{}
		for _, c := range report.Cases {
			if c.Status != results.Passed {
				notPassed = append(notPassed, c.Name+" ("+string(c.Status)+")")
				continue
			}
			parts := strings.Split(c.Name, "/")
			passed[parts[0]+"/"+parts[len(parts)-1]] = true
		}
		if len(notPassed) > 0 {
			t.Errorf("the fake GPU and NIC drivers' manifests on the conformance lab: not passed: %v; want every check run and passed", notPassed)
		}
		m, err := manifest.Load(*manifestFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range cluster.Features(m, cluster.Options{}) {
			if !passed["cluster/"+f.Name()] {
				t.Errorf("feature %q passed for neither driver", f.Name())
			}
		}
		for _, c := range sanity.Checks() {
			for _, driver := range []string{"gpu.dralab.dev", "nic.dralab.dev"} {
				if !slices.ContainsFunc(report.Cases, func(k results.Case) bool { return k.Name == "sanity/"+driver+"/"+c.Name && k.Status == results.Passed }) {
					t.Errorf("sanity check %s did not pass for %s", c.Name, driver)
				}
			}
		}
	}
}
