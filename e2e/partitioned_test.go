package e2e

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/examples"
	"github.com/dralab/dralab/lab/labtest"
	"github.com/dralab/dralab/scenarios"
)

// partitionedScenarios need split or shared GPUs, which the default lab
// does not have: on it TestScenarios skips them as unmet, and only them
// and fabricScenarios.
var partitionedScenarios = []string{"mig-partitions", "gpu-sharing", "mig-fallback"}

// fabricScenarios need fabric-attached GPUs, which the default lab does
// not have either.
var fabricScenarios = []string{"fabric-attach"}

// TestPartitionedScenarios starts its own lab from
// lab/examples/partitioned.yaml (a MIG H100 and a shared L4), runs the
// scenarios of split and shared GPUs on it, one after another, and deletes
// it. It runs only where the suite starts embedded labs.
func TestPartitionedScenarios(t *testing.T) {
	runOnExampleLab(t, "partitioned.yaml", "dralab-e2e-partitioned", partitionedScenarios)
}

// TestFabricScenarios does the same with lab/examples/fabric.yaml (two
// fabric-attached H100s) for the scenarios of binding conditions.
func TestFabricScenarios(t *testing.T) {
	runOnExampleLab(t, "fabric.yaml", "dralab-e2e-fabric", fabricScenarios)
}

// runOnExampleLab starts a lab of an example configuration, runs the named
// scenarios on it, one after another, and deletes it.
func runOnExampleLab(t *testing.T, file, labName string, names []string) {
	requireCluster(t)
	if theLab == nil {
		t.Skip("runs on an embedded lab of its own; against --kubeconfig, TestScenarios runs these scenarios where the cluster has what they require")
	}
	data, err := examples.FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("lab/examples/"+file, data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := labtest.Start(ctx, cfg, labName)
	t.Cleanup(func() {
		if err := labtest.Stop(context.Background(), l); err != nil {
			t.Errorf("deleting lab %s: %v", labName, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s, err := scenarios.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			// The lab was chosen for these scenarios: each must run.
			runScenario(ctx, t, restConfig, s, unmetPolicy{lab: "lab/examples/" + file})
		})
	}
}
