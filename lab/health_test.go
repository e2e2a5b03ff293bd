package lab_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab"
)

// failureTimes are the moments of a GPU failure's path, from gpu:fail.
type failureTimes struct {
	unhealthy, tainted, replaced, healed time.Duration
}

// TestGPUFailure fails the H100 of a Deployment's pod on the default lab
// as gpu:fail does: within 60 s the pod's allocatedResourcesStatus says
// Unhealthy with the XID, the device carries a NoExecute taint in its
// ResourceSlice, the pod is evicted and its replacement runs on the other
// H100; gpu:heal removes the taint and the GPU takes a pod again.
func TestGPUFailure(t *testing.T) {
	ctx := context.Background()
	l, _, client := upLab(ctx, t, stateRoot(t), binary(t), exampleConfig(t, "default.yaml", "t-health"))
	times := failOnce(ctx, t, l, client, "failure")
	t.Logf("from gpu:fail: Unhealthy in the pod's status after %v, tainted after %v, replacement Running after %v; from gpu:heal: untainted after %v",
		times.unhealthy, times.tainted, times.replaced, times.healed)
	for name, d := range map[string]time.Duration{"Unhealthy": times.unhealthy, "tainted": times.tainted, "replaced": times.replaced} {
		if d > time.Minute {
			t.Errorf("%s %v after gpu:fail, want within 60 s", name, d)
		}
	}
}

// BenchmarkGPUFailure measures the failure path of TestGPUFailure, one
// failure per iteration on one lab: p50 and max of each step.
//
//	go test ./lab -run '^$' -bench GPUFailure -benchtime 10x
func BenchmarkGPUFailure(b *testing.B) {
	ctx := context.Background()
	l, _, client := upLab(ctx, b, stateRoot(b), binary(b), exampleConfig(b, "default.yaml", "b-health"))
	var all []failureTimes
	for i := 0; b.Loop(); i++ {
		all = append(all, failOnce(ctx, b, l, client, fmt.Sprintf("failure-%d", i)))
	}
	for _, m := range []struct {
		name string
		get  func(failureTimes) time.Duration
	}{
		{"unhealthy", func(f failureTimes) time.Duration { return f.unhealthy }},
		{"tainted", func(f failureTimes) time.Duration { return f.tainted }},
		{"replaced", func(f failureTimes) time.Duration { return f.replaced }},
		{"healed", func(f failureTimes) time.Duration { return f.healed }},
	} {
		var ds []time.Duration
		for _, f := range all {
			ds = append(ds, m.get(f))
		}
		slices.Sort(ds)
		b.ReportMetric(ds[len(ds)/2].Seconds()*1000, "ms-p50-"+m.name)
		b.ReportMetric(ds[len(ds)-1].Seconds()*1000, "ms-max-"+m.name)
	}
}

// failOnce runs a Deployment of one H100 pod in a namespace of its own,
// fails its GPU, follows the failure path, heals the GPU, and deletes the
// namespace.
func failOnce(ctx context.Context, tb testing.TB, l *lab.Lab, client kubernetes.Interface, ns string) failureTimes {
	tb.Helper()
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err != nil, nil
		})
	}()
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "h100", gpu.Tiers[0].ClassName(), "", ""), metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	pod := scratchlab.ClaimPod(ns, "", "h100")
	// A training job's grace period, to write a checkpoint: the kubelet
	// reports the GPU's health while the evicted pod terminates.
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	labels := map[string]string{"app": "training"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "training", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	first, device := runningOn(ctx, tb, client, ns, "")
	ref := lab.GPURef{Node: first.Spec.NodeName, Device: device}
	// The driver wrote what it prepared into the claim's status.
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *first.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if ds := claim.Status.Devices; len(ds) != 1 || ds[0].Device != device || len(ds[0].Conditions) != 1 || ds[0].Conditions[0].Type != "Ready" ||
		ds[0].Data == nil || !strings.Contains(string(ds[0].Data.Raw), `"productName":"NVIDIA H100 80GB HBM3"`) {
		tb.Errorf("claim %s status.devices %+v, want %s Ready with its product", claim.Name, ds, device)
	}

	// Every status of the pod is watched: it may be short-lived, as the
	// pod is evicted.
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + first.Name, ResourceVersion: first.ResourceVersion})
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Stop()
	unhealthy := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*v1.Pod); ok && podHealth(p) == "Unhealthy: XID 79: GPU has fallen off the bus" {
				unhealthy <- time.Now()
				return
			}
		}
	}()

	start := time.Now()
	if _, err := l.FailGPU(ctx, ref, gpu.DefaultXID); err != nil {
		tb.Fatal(err)
	}
	var times failureTimes
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case at := <-unhealthy:
			times.unhealthy = at.Sub(start)
		default:
		}
		if times.tainted == 0 && deviceTaint(ctx, client, ref) == fmt.Sprintf("%s=79:NoExecute", gpu.TaintKeyXID) {
			times.tainted = time.Since(start)
		}
		return times.unhealthy > 0 && times.tainted > 0, nil
	})
	if err != nil {
		p, _ := client.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		if p != nil {
			tb.Logf("pod %s container statuses: %+v", p.Name, p.Status.ContainerStatuses)
		}
		_ = l.CollectLogs(ctx, "/tmp/b1/logs")
		tb.Fatalf("after gpu:fail %s: Unhealthy after %v, tainted after %v (0: not seen): %v", ref, times.unhealthy, times.tainted, err)
	}
	second, device2 := runningOn(ctx, tb, client, ns, first.Name)
	times.replaced = time.Since(start)
	if second.Spec.NodeName != ref.Node || device2 == ref.Device {
		tb.Errorf("the replacement runs on %s/%s, want the other H100 of %s", second.Spec.NodeName, device2, ref.Node)
	}
	if p, err := client.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{}); err == nil {
		evicted := false
		for _, c := range p.Status.Conditions {
			evicted = evicted || (c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue)
		}
		if p.DeletionTimestamp == nil || !evicted {
			tb.Errorf("pod %s is not being evicted after its GPU failed: deletion %v, conditions %+v", first.Name, p.DeletionTimestamp, p.Status.Conditions)
		}
	}

	// lab:status says which GPU failed, and with what.
	if got := nodeGPUHealth(ctx, tb, l, ref.Node); !strings.Contains(got, "1 failed (Xid 79)") {
		tb.Errorf("lab:status gives node %s's GPUs as %q after gpu:fail %s, want one failed with Xid 79", ref.Node, got, ref)
	}

	start = time.Now()
	if err := l.HealGPU(ctx, ref); err != nil {
		tb.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return deviceTaint(ctx, client, ref) == "", nil
	}); err != nil {
		tb.Fatalf("after gpu:heal %s the device is still tainted %s", ref, deviceTaint(ctx, client, ref))
	}
	times.healed = time.Since(start)
	if got := nodeGPUHealth(ctx, tb, l, ref.Node); strings.Contains(got, "failed") || !strings.HasSuffix(got, " healthy") {
		tb.Errorf("lab:status gives node %s's GPUs as %q after gpu:heal %s, want all healthy", ref.Node, got, ref)
	}
	// Healed, the GPU takes a pod again: a second replica gets it.
	if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "training", "application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		tb.Fatal(err)
	}
	third, device3 := runningOn(ctx, tb, client, ns, first.Name, second.Name)
	if third.Spec.NodeName != ref.Node || device3 != ref.Device {
		tb.Errorf("after gpu:heal the second replica runs on %s/%s, want the healed %s", third.Spec.NodeName, device3, ref)
	}
	return times
}

// runningOn waits for a Running pod of the namespace other than those
// named, and returns it with its device.
func runningOn(ctx context.Context, tb testing.TB, client kubernetes.Interface, ns string, not ...string) (*v1.Pod, string) {
	tb.Helper()
	var found *v1.Pod
	var device string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i, p := range pods.Items {
			if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil || slices.Contains(not, p.Name) || len(p.Status.ResourceClaimStatuses) == 0 {
				continue
			}
			claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			if err != nil || claim.Status.Allocation == nil {
				continue
			}
			found, device = &pods.Items[i], claim.Status.Allocation.Devices.Results[0].Device
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		tb.Fatalf("no Running pod in %s besides %v: %v", ns, not, err)
	}
	return found, device
}

// podHealth is the health of the pod's one device as the kubelet reports
// it: "<health>: <message>", or "" before any report.
func podHealth(p *v1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				return strings.TrimSuffix(fmt.Sprintf("%s: %s", r.Health, ptr.Deref(r.Message, "")), ": ")
			}
		}
	}
	return ""
}

// deviceTaint is the device's taints in its ResourceSlice, as
// key=value:effect, or "".
func deviceTaint(ctx context.Context, client kubernetes.Interface, ref lab.GPURef) string {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + ref.Node})
	if err != nil {
		return ""
	}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if d.Name != ref.Device {
				continue
			}
			var out []string
			for _, tn := range d.Taints {
				out = append(out, fmt.Sprintf("%s=%s:%s", tn.Key, tn.Value, tn.Effect))
			}
			return strings.Join(out, ",")
		}
	}
	return ""
}

// nodeGPUHealth is a node's GPU health as lab:status shows it.
func nodeGPUHealth(ctx context.Context, tb testing.TB, l *lab.Lab, node string) string {
	tb.Helper()
	st, err := l.Status(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Name == node {
			return n.GPUHealth
		}
	}
	tb.Fatalf("lab:status has no node %s", node)
	return ""
}
