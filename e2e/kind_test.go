package e2e

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/scenarios"
)

// TestKindLab brings up the default lab on the kind backend (kind's Go
// library, the driver image loaded into the nodes, the chart installed
// with the Helm SDK) and runs every scenario on it. Where no container
// engine can run kind, it says so and skips: kind needs privileged
// containers and the kindest/node image.
func TestKindLab(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	if _, err := build.Dralab(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Name = "dralab-e2e-kind"
	cfg.Backend = config.BackendKind
	root, err := os.MkdirTemp("", "dralab-e2e-kind-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Up(ctx); errors.Is(err, lab.ErrNoEngine) {
		t.Skipf("kind run skipped on this machine: %v. kind needs a container engine that runs privileged containers and can pull %s; the embedded lab runs the same suite here", err, config.KindNodeImage)
	} else if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Down(ctx); err != nil {
			t.Error(err)
		}
	}()
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	all, from, err := scenarios.Selected()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scenarios: %s", from)
	for _, s := range all {
		// kind runs the default lab's nodes, without partitioned,
		// shared or fabric-attached GPUs.
		policy := unmetPolicy{lab: "the default lab on kind", expected: slices.Concat(partitionedScenarios, fabricScenarios, workloadScenarios, nicScenarios, frontierScenarios)}
		t.Run(s.Name, func(t *testing.T) { runScenario(ctx, t, restConfig, l, s, policy) })
	}
}
