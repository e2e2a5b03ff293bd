package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// gpuNodes counts the driver's published GPUs per tier, from the slices.
func gpuNodes(ctx context.Context, t *testing.T, client kubernetes.Interface) map[string]int {
	t.Helper()
	rows, err := allocation.Read(ctx, client, "default", nodedrivers.Vocabulary)
	if err != nil {
		t.Fatal(err)
	}
	perTier := map[string]int{}
	for _, s := range rows.Slices {
		if s.Spec.Driver != gpu.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			tier, err := nodedrivers.Vocabulary.Tier(ctx, s.Spec.Driver, &d)
			if err != nil {
				t.Fatal(err)
			}
			perTier[tier]++
		}
	}
	return perTier
}

// settle waits until every pod of a namespace runs or has been found
// unschedulable by the scheduler.
func settle(ctx context.Context, client kubernetes.Interface, namespace string, timeout time.Duration) error {
	return wait.For(func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase == v1.PodRunning {
				continue
			}
			unschedulable := false
			for _, c := range p.Status.Conditions {
				unschedulable = unschedulable || (c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable)
			}
			if !unschedulable {
				return false, nil
			}
		}
		return true, nil
	}, wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(100*time.Millisecond))
}

type gpuTest struct {
	client    kubernetes.Interface
	namespace string
}

type gpuTestKey struct{}

func gpuSetup(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	client, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	g := &gpuTest{client: client, namespace: envconf.RandomName("gpu", 16)}
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.namespace}}); err != nil {
		t.Fatal(err)
	}
	return context.WithValue(ctx, gpuTestKey{}, g)
}

func gpuTeardown(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
	g, ok := ctx.Value(gpuTestKey{}).(*gpuTest)
	if !ok {
		return ctx
	}
	if t.Failed() {
		dumpDiagnostics(ctx, t, theLab, g.client, g.namespace)
	}
	deleteNamespace(ctx, t, g.client, g.namespace)
	return ctx
}

// deleteNamespace deletes a namespace and waits until it is gone, so that
// its claims have released their devices before the next test counts them.
func deleteNamespace(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace string) {
	t.Helper()
	if err := client.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting namespace %s: %v", namespace, err)
		return
	}
	err := wait.For(func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, wait.WithContext(ctx), wait.WithTimeout(2*time.Minute), wait.WithInterval(200*time.Millisecond))
	if err != nil {
		t.Errorf("namespace %s was not deleted: %v", namespace, err)
	}
}

func TestGPUDriver(t *testing.T) {
	requireCluster(t)
	tierClass := gpu.Tiers[0].ClassName() // h100

	byClass := features.New("a tier class selects that tier").
		WithLabel("driver", "fakegpu").
		Setup(gpuSetup).
		Assess("an H100 claim lands on an H100 and its container sees it", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			g := ctx.Value(gpuTestKey{}).(*gpuTest)
			mustCreate(ctx, t, g.client, scratchlab.ClaimTemplate(g.namespace, "h100", tierClass, "", ""), scratchlab.ClaimPod(g.namespace, "trainer", "h100"))
			if err := settle(ctx, g.client, g.namespace, time.Minute); err != nil {
				t.Fatal(err)
			}
			rows, err := allocation.Allocations(ctx, g.client, g.namespace, nodedrivers.Vocabulary)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].Phase != v1.PodRunning || rows[0].Tier != "h100" {
				t.Fatalf("allocation = %+v, want one running pod on an h100", rows)
			}
			logs, err := g.client.CoreV1().Pods(g.namespace).GetLogs("trainer", &v1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{gpu.EnvPrefix + "_0=" + rows[0].Device, gpu.EnvPrefix + "_0_PRODUCT=" + rows[0].Product} {
				if !containsLine(string(logs), want) {
					t.Errorf("container env lacks %q:\n%s", want, logs)
				}
			}
			if !strings.Contains(rows[0].Product, "H100") {
				t.Errorf("product %q is not an H100", rows[0].Product)
			}
			return ctx
		}).
		Teardown(gpuTeardown).
		Feature()

	byMemory := features.New("a memory selector excludes small GPUs").
		WithLabel("driver", "fakegpu").
		Setup(gpuSetup).
		Assess("memory >= 40Gi never gets an L4, even when nothing else is left", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			g := ctx.Value(gpuTestKey{}).(*gpuTest)
			tiers := gpuNodes(ctx, t, g.client)
			big := tiers["h100"] + tiers["a100"]
			if big == 0 || tiers["l4"] == 0 {
				t.Fatalf("the cluster needs large GPUs and L4s for this test; it has %v", tiers)
			}
			sel := fmt.Sprintf(`device.capacity[%q].memory.compareTo(quantity("40Gi")) >= 0`, gpu.DriverName)
			mustCreate(ctx, t, g.client, scratchlab.ClaimTemplate(g.namespace, "big", gpu.ClassAny, sel, ""))
			for i := range big + 1 {
				mustCreate(ctx, t, g.client, scratchlab.ClaimPod(g.namespace, fmt.Sprintf("big-%d", i), "big"))
			}
			if err := settle(ctx, g.client, g.namespace, time.Minute); err != nil {
				t.Fatal(err)
			}
			rows, err := allocation.Allocations(ctx, g.client, g.namespace, nodedrivers.Vocabulary)
			if err != nil {
				t.Fatal(err)
			}
			running, pending := 0, 0
			for _, r := range rows {
				switch {
				case r.Tier == "l4":
					t.Errorf("pod %s got an L4 (%s) despite memory >= 40Gi", r.Pod, r.DeviceRef())
				case r.Phase == v1.PodRunning && r.Device != "":
					running++
				case r.Node == "":
					pending++
				}
			}
			if running != big || pending != 1 {
				t.Errorf("%d running and %d pending, want %d running (every large GPU) and 1 pending", running, pending, big)
			}
			return ctx
		}).
		Teardown(gpuTeardown).
		Feature()

	testenv.Test(t, byClass, byMemory)
}

// TestDriverRestart kills a node's GPU driver while one of its claims is
// prepared. The lab restarts it, as a DaemonSet would; the restarted driver
// still knows the claim from its checkpoint, unprepares it when the pod
// goes, and never hands the device out twice.
func TestDriverRestart(t *testing.T) {
	requireCluster(t)
	f := features.New("driver restart with a prepared claim").
		WithLabel("lab", "embedded").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if theLab == nil {
				t.Skip("needs the embedded lab: the test kills a driver process on this host")
			}
			return gpuSetup(ctx, t, cfg)
		}).
		Assess("the claim survives the restart and is unprepared after it", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			g := ctx.Value(gpuTestKey{}).(*gpuTest)
			tier := gpu.Tiers[0]
			mustCreate(ctx, t, g.client, scratchlab.ClaimTemplate(g.namespace, "one", tier.ClassName(), "", ""), scratchlab.ClaimPod(g.namespace, "first", "one"))
			if err := settle(ctx, g.client, g.namespace, time.Minute); err != nil {
				t.Fatal(err)
			}
			rows, err := allocation.Allocations(ctx, g.client, g.namespace, nodedrivers.Vocabulary)
			if err != nil || len(rows) != 1 || rows[0].Phase != v1.PodRunning {
				t.Fatalf("first pod: %+v, %v", rows, err)
			}
			first := rows[0]
			st, err := theLab.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var cdiDir, checkpoint string
			for _, n := range st.Nodes {
				if n.Name == first.Node {
					cdiDir = n.CDIDir
					checkpoint = filepath.Join(filepath.Dir(n.CDIDir), "driver", "checkpoint.json")
				}
			}
			// Killed; the lab restarts it.
			if err := theLab.RestartDriver(ctx, gpu.DriverName, first.Node); err != nil {
				t.Fatalf("the driver was not restarted: %v", err)
			}
			// The prepared claim's spec, and the driver-wide device's while
			// a claim is prepared.
			vendor, class := parser.ParseQualifier(gpu.CDIKind)
			nodeSpec := cdi.GenerateSpecName(vendor, class) + ".json"
			if specs := specFiles(t, cdiDir); len(specs) != 2 || !slices.Contains(specs, nodeSpec) {
				t.Errorf("CDI specs after restart: %v, want the prepared claim's and %s", specs, nodeSpec)
			}
			cp := readCheckpoint(t, checkpoint)
			if len(cp.Claims) != 1 {
				t.Fatalf("checkpoint after restart holds %d claims, want 1", len(cp.Claims))
			}
			for _, c := range cp.Claims {
				if len(c.Devices) != 1 || c.Devices[0].Device != first.Device {
					t.Errorf("checkpointed claim %+v, want device %s", c, first.Device)
				}
			}
			if err := g.client.CoreV1().Pods(g.namespace).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			err = wait.For(func(context.Context) (bool, error) {
				return len(specFiles(t, cdiDir)) == 0 && len(readCheckpoint(t, checkpoint).Claims) == 0, nil
			}, wait.WithContext(ctx), wait.WithTimeout(time.Minute), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("the restarted driver did not unprepare the claim: %v", err)
			}
			return ctx
		}).
		Teardown(gpuTeardown).
		Feature()
	testenv.Test(t, f)
}

func specFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func readCheckpoint(t *testing.T, path string) *kit.Checkpoint {
	t.Helper()
	cp, err := kit.ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// mustCreate creates objects in order.
func mustCreate(ctx context.Context, t *testing.T, client kubernetes.Interface, objs ...any) {
	t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *resourceapi.ResourceClaimTemplate:
			_, err = client.ResourceV1().ResourceClaimTemplates(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *v1.Pod:
			_, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("mustCreate: unsupported %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
