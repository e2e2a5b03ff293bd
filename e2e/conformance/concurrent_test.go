package conformance

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	conformance "github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/internal/harness/scratchlab"
)

// TestConcurrentRuns: two runs of the cluster layer started at once on one
// lab (two CI jobs on a shared cluster) take turns, a feature at a time,
// through the lock; neither deletes the other's objects or takes its
// devices, and both pass every feature, each checking the GPU and NIC
// drivers together. The lock is gone afterwards.
func TestConcurrentRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab: run without -short")
	}
	ctx := context.Background()
	cfg, err := scratchlab.ConformanceConfig()
	if err != nil {
		t.Fatal(err)
	}
	l, err := scratchlab.Start(ctx, cfg, "t-concurrent")
	t.Cleanup(func() {
		if err := scratchlab.Stop(context.Background(), l); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	reports := make([]*results.Report, 2)
	errs := make([]error, 2)
	for i := range reports {
		wg.Go(func() {
			o := conformance.Options{Manifest: defaultManifest, Together: []string{defaultTogether}, Kubeconfig: l.Kubeconfig(), Layer: conformance.LayerCluster}
			o.Cluster.RunID = fmt.Sprintf("concurrent-%d", i)
			reports[i], errs[i] = scratchlab.Conformance(ctx, o, nil)
		})
	}
	wg.Wait()
	for i, r := range reports {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		var notPassed []string
		for _, c := range r.Cases {
			if c.Status != results.Passed {
				notPassed = append(notPassed, fmt.Sprintf("%s (%s: %s)", c.Name, c.Status, c.Message))
			}
			if strings.Contains(c.Output, "removed what an interrupted run left") {
				t.Errorf("run %d, %s removed the other run's objects:\n%s", i, c.Name, c.Output)
			}
		}
		if len(notPassed) > 0 || len(r.Cases) == 0 {
			t.Errorf("run %d of 2 at once: %d features, not passed: %s", i, len(r.Cases), strings.Join(notPassed, "; "))
		}
		t.Logf("run %d:\n%s", i, r.Summary())
	}

	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)
	if lease, err := client.CoordinationV1().Leases(cluster.LockNamespace).Get(ctx, cluster.LockName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after both runs the lock %s/%s is still there (%v, %v)", cluster.LockNamespace, cluster.LockName, lease, err)
	}
}
