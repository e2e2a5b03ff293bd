package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab"
)

// poolCount is what a pool has: devices published, and allocated to
// claims.
type poolCount struct{ total, allocated int32 }

// checkPoolStatus asks the lab's controller manager for the GPU driver's
// pools (a ResourcePoolStatusRequest, resource.k8s.io/v1alpha3, gate
// DRAResourcePoolStatus) with an H100 and a time-sliced A100 share held by
// a pod and after, and compares each pool's devices and allocated devices,
// and each partition type's devices and allocatable ones, with what the lab
// itself counts from the ResourceSlices and the claims' allocations.
func checkPoolStatus(t *testing.T, l *lab.Lab) {
	ctx := context.Background()
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)
	ns := "pool-status"
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// A pod holding an H100, and one holding a time-sliced share of the
	// partitioned A100 (another node).
	for _, h := range []struct{ pod, claim, class string }{{"holder", "h100", "h100." + gpu.DriverName}, {"sharer", "share", gpu.ClassTimeSlice}} {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: h.claim}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: h.class}}}}}}
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: h.pod}, Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims:                []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(h.claim)}},
		}}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, h.pod, metav1.GetOptions{})
			return err == nil && p.Status.Phase == v1.PodRunning, nil
		}); err != nil {
			t.Fatalf("the pod holding claim %s never ran: %v", h.claim, err)
		}
	}
	held, types := comparePoolStatus(ctx, t, client, "with-holder")
	if n := held["gpu-h100"].allocated; n != 1 {
		t.Errorf("with a pod holding an H100 the request counts %d allocated in pool gpu-h100, want 1", n)
	}
	// The share takes a time slice and the whole GPU's place; the MIG
	// placements fit by counters, which is all the pool status weighs,
	// but their group keeps them out.
	for typ, want := range map[string][3]int{"gpu-0/time-slice": {4, 3, 3}, "gpu-0/whole": {1, 0, 0}, "gpu-0/1g.10gb@0": {1, 1, 0}} {
		pt := types["gpu-a100-mig "+typ]
		if got := [3]int{pt.Total, pt.Allocatable, pt.Admitted}; got != want {
			t.Errorf("with a share held, partition type %s: (devices, allocatable, admitted by groups) %v, want %v", typ, got, want)
		}
	}
	for pod, claim := range map[string]string{"holder": "h100", "sharer": "share"} {
		if err := client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if err := client.ResourceV1().ResourceClaims(ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		claims, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the claim never went: %v", err)
	}
	free, _ := comparePoolStatus(ctx, t, client, "after")
	if n := free["gpu-h100"].allocated; n != 0 {
		t.Errorf("after the pod the request counts %d allocated in pool gpu-h100, want 0", n)
	}
}

// comparePoolStatus creates a ResourcePoolStatusRequest for the GPU
// driver, waits for the controller's answer and compares it, pool by pool
// and partition type by partition type, with the lab's own count; it
// returns the answer's pools and the lab's partition types.
func comparePoolStatus(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) (map[string]poolCount, map[string]allocation.PartitionType) {
	t.Helper()
	req := &resourcev1alpha3.ResourcePoolStatusRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1alpha3.ResourcePoolStatusRequestSpec{Driver: gpu.DriverName}}
	if _, err := client.ResourceV1alpha3().ResourcePoolStatusRequests().Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.ResourceV1alpha3().ResourcePoolStatusRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	var answer *resourcev1alpha3.ResourcePoolStatusRequest
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := client.ResourceV1alpha3().ResourcePoolStatusRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil || r.Status == nil {
			return false, nil
		}
		answer = r
		return true, nil
	}); err != nil {
		t.Fatalf("ResourcePoolStatusRequest %s was never answered: %v", name, err)
	}
	if c := answer.Status.Conditions; len(c) == 0 || c[0].Type != "Complete" || c[0].Status != metav1.ConditionTrue {
		t.Fatalf("ResourcePoolStatusRequest %s: conditions %+v, want Complete", name, c)
	}
	snap, err := allocation.Read(ctx, client, metav1.NamespaceAll, nodedrivers.Vocabulary)
	if err != nil {
		t.Fatal(err)
	}
	lab := map[string]poolCount{}
	for _, sl := range snap.Slices {
		if sl.Spec.Driver == gpu.DriverName {
			c := lab[sl.Spec.Pool.Name]
			c.total += int32(len(sl.Spec.Devices))
			lab[sl.Spec.Pool.Name] = c
		}
	}
	for key := range snap.AllocatedDevices() {
		for pool := range lab {
			if rest, ok := strings.CutPrefix(key, gpu.DriverName+"/"+pool+"/"); ok && !strings.Contains(rest, "/") {
				c := lab[pool]
				c.allocated++
				lab[pool] = c
			}
		}
	}
	got := map[string]poolCount{}
	for _, p := range answer.Status.Pools {
		if p.ValidationError != nil {
			t.Errorf("pool %s: %s", p.PoolName, *p.ValidationError)
			continue
		}
		got[p.PoolName] = poolCount{ptr.Deref(p.TotalDevices, -1), ptr.Deref(p.AllocatedDevices, -1)}
		if a, u := ptr.Deref(p.AvailableDevices, -1), ptr.Deref(p.UnavailableDevices, -1); a+u+ptr.Deref(p.AllocatedDevices, 0) != ptr.Deref(p.TotalDevices, 0) {
			t.Errorf("pool %s: %d available, %d unavailable and %d allocated do not add up to its %d devices", p.PoolName, a, u, ptr.Deref(p.AllocatedDevices, 0), ptr.Deref(p.TotalDevices, 0))
		}
	}
	types := checkPartitionSummary(t, name, snap, answer)
	if !maps.Equal(got, lab) {
		t.Errorf("%s: the request counts (devices, allocated) %v; the lab counts %v", name, fmt.Sprint(sorted(got)), fmt.Sprint(sorted(lab)))
	}
	t.Logf("%s: pools (devices, allocated) %v, as the lab counts them", name, sorted(got))
	return got, types
}

func sorted(m map[string]poolCount) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d/%d", k, m[k].total, m[k].allocated))
	}
	return out
}

// checkPartitionSummary compares each partition summary of the answer
// (DRAPartitionableDevicesType: the slices of the frontier lab's
// partitioned, time-sliced A100 name gpu.dralab.dev/partitionType) with
// the lab's own count (allocation.PartitionTypes): the devices of each type,
// and how many more of them the counters left allow. It returns the lab's
// count by type.
func checkPartitionSummary(t *testing.T, name string, snap *allocation.Snapshot, answer *resourcev1alpha3.ResourcePoolStatusRequest) map[string]allocation.PartitionType {
	t.Helper()
	lab := map[string]allocation.PartitionType{}
	for _, pt := range snap.PartitionTypes() {
		if pt.Driver == gpu.DriverName {
			lab[pt.Pool+" "+pt.Type] = pt
		}
	}
	got := map[string]bool{}
	for _, p := range answer.Status.Pools {
		for _, ps := range p.PartitionSummary {
			k := p.PoolName + " " + ps.Type
			got[k] = true
			want, ok := lab[k]
			switch {
			case !ok:
				t.Errorf("%s: pool %s, partition type %s (%s): the lab has no such type", name, p.PoolName, ps.Type, ps.Attribute)
			case ps.Attribute != want.Attribute:
				t.Errorf("%s: pool %s summarizes by %s, the slices name %s", name, p.PoolName, ps.Attribute, want.Attribute)
			case int(ptr.Deref(ps.Total, -1)) != want.Total || int(ptr.Deref(ps.Allocatable, -1)) != want.Allocatable:
				t.Errorf("%s: pool %s, partition type %s: the answer counts %d devices, %d allocatable; the lab %d, %d", name, p.PoolName, ps.Type, ptr.Deref(ps.Total, -1), ptr.Deref(ps.Allocatable, -1), want.Total, want.Allocatable)
			}
		}
	}
	for k := range lab {
		if !got[k] {
			t.Errorf("%s: the lab counts partition type %s, the answer has none", name, k)
		}
	}
	if len(lab) == 0 {
		t.Errorf("%s: no pool names partition types; the frontier lab's partitioned A100 should", name)
	}
	return lab
}

// checkExtendedResourceOverhead keeps track of a Kubernetes 1.37.2 bug
// (kubernetes/kubernetes#141467, fixed for 1.38 by #141556): a pod asking
// for an extended resource backed by DRA, given a device that declares
// nodeAllocatableResources (an H100 with its host-memory overhead), is
// never bound: the scheduler records the device's share under the name of
// its in-memory claim, which the API server refuses. The conformance
// suite's extended-resource check keeps off such nodes; once Kubernetes
// fixes it, this fails, and both can go.
func checkExtendedResourceOverhead(t *testing.T, l *lab.Lab) {
	ctx := context.Background()
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)
	ns := "extended-overhead"
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	res := v1.ResourceName("deviceclass.resource.kubernetes.io/h100." + gpu.DriverName)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "counted"}, Spec: v1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   v1.ResourceList{res: resource.MustParse("1")},
		}}},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const bug = "no mapping found in pod reference"
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "counted", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod counted was bound to %s: Kubernetes records an extended resource's device share now (kubernetes/kubernetes#141556?); drop this check and the conformance suite's detour", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled {
				last = c.Message
			}
		}
		return strings.Contains(last, bug), nil
	}); err != nil {
		t.Fatalf("pod counted, asking %s on a lab whose H100s declare host-memory overhead: %v (last: %q)", res, err, last)
	}
	t.Logf("pod counted is not bound: %s", last)
}
