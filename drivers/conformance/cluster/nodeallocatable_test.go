package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// overheadDevices are two fake devices that each cost a pod 8Gi of host
// memory; declare false leaves the second without.
func overheadDevices(declare bool) []resourceapi.Device {
	devs := fakeDevices(2, false)
	for i := range devs {
		if i == 1 && !declare {
			continue
		}
		devs[i].NodeAllocatableResources = map[v1.ResourceName]resourceapi.NodeAllocatableResource{
			v1.ResourceMemory: {Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: ptr.To(resource.MustParse("8Gi"))}},
		}
	}
	return devs
}

// The node-allocatable check passes only when a pod's status accounts
// exactly what its device declares and the scheduler keeps off the node a
// pod whose container fits only without its device's share: a scheduler
// that records another amount, or leaves the share out of its fit, fails
// it; a class of no declaring device fails it; a node where some devices
// declare and some do not is skipped, a claim could not be sure to get one.
func TestNodeAllocatableMustAccountWhatTheDeviceDeclares(t *testing.T) {
	for _, c := range []struct {
		name    string
		devices []resourceapi.Device
		setup   func(*fakeCluster)
		want    string
		skip    bool
	}{
		{name: "accounted", devices: overheadDevices(true)},
		{name: "another amount recorded", devices: overheadDevices(true), setup: func(f *fakeCluster) {
			f.misaccount = func(s *v1.NodeAllocatableResourceClaimStatus) {
				s.Overhead[0].PerPod = ptr.To(resource.MustParse("4Gi"))
			}
		}, want: "gives claim costs overhead per pod 4Gi memory; its device node-a/gpu-0 declares overhead per pod 8Gi memory"},
		{name: "share left out of the fit", devices: overheadDevices(true), setup: func(f *fakeCluster) { f.ignoreOverhead.Store(true) }, want: "pod costs-over was scheduled"},
		{name: "no device declares", devices: fakeDevices(2, false), want: "no free device of class gpu.example.com declares nodeAllocatableResources"},
		{name: "some devices declare", devices: overheadDevices(false), skip: true, want: "node-a (1 of 2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, k := newFakeClusterOf(t, refuseWithEvent, c.devices)
			k.m.Timeouts.PodRunning = 2 * time.Second
			f.nodeMemory = ptr.To(resource.MustParse("64Gi"))
			if _, err := f.client.CoreV1().Nodes().Create(context.Background(), &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fakeNode},
				Status:     v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourceMemory: *f.nodeMemory}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if c.setup != nil {
				c.setup(f)
			}
			expectVerdict(t, k.nodeAllocatable(context.Background(), t.Logf, k), c.want, c.skip)
		})
	}
}

// expectVerdict checks a check's error: none when want is empty, else one
// saying want, a skipCheck exactly when skipped.
func expectVerdict(t *testing.T, err error, want string, skipped bool) {
	t.Helper()
	var skip skipCheck
	switch {
	case want == "" && err != nil:
		t.Fatalf("the check fails on a cluster that does it right: %v", err)
	case want == "":
	case err == nil:
		t.Fatalf("the check passed; want %q", want)
	case errors.As(err, &skip) != skipped:
		t.Fatalf("skipped %v, want %v: %v", !skipped, skipped, err)
	case !strings.Contains(err.Error(), want):
		t.Fatalf("the check failed with %q; want %q", err, want)
	}
}

// What a device declares, for a pod of n containers: a CPU mapping by
// device count and by consumed capacity, overheads per pod and per
// container; the status's entry read back the same way.
func TestDeclaredAndAccounted(t *testing.T) {
	dev := resourceapi.Device{
		Name:     "ccx-0",
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"cores": {Value: resource.MustParse("8")}},
		NodeAllocatableResources: map[v1.ResourceName]resourceapi.NodeAllocatableResource{
			v1.ResourceCPU:    {Mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName]("cores"), CapacityMultiplier: ptr.To(resource.MustParse("2"))}},
			v1.ResourceMemory: {Mapping: &resourceapi.NodeAllocatableMapping{DeviceMultiplier: ptr.To(resource.MustParse("1Gi"))}, Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: ptr.To(resource.MustParse("100Mi")), PerContainer: ptr.To(resource.MustParse("10Mi"))}},
		},
	}
	r := resourceapi.DeviceRequestAllocationResult{Pool: "p", Device: "ccx-0", ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("3")}}
	a, err := declared(dev, r, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := amountsText(a), "mapped 6 cpu, mapped 1Gi memory, overhead per pod 100Mi memory, overhead per container 20Mi memory"; got != want {
		t.Errorf("declared %q, want %q", got, want)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: v1.PodStatus{NodeAllocatableResourceClaimStatuses: []v1.NodeAllocatableResourceClaimStatus{{
		ResourceClaimName: "c", Containers: []string{"a", "b"},
		Mapping:  []v1.NodeAllocatableMappedResources{{Name: v1.ResourceCPU, Quantity: ptr.To(resource.MustParse("6"))}, {Name: v1.ResourceMemory, Quantity: ptr.To(resource.MustParse("1Gi"))}},
		Overhead: []v1.NodeAllocatableOverheadResources{{Name: v1.ResourceMemory, PerPod: ptr.To(resource.MustParse("100Mi")), PerContainer: ptr.To(resource.MustParse("10Mi"))}},
	}}}}
	b, err := accounted(pod, "c")
	if err != nil || !sameAmounts(a, b) {
		t.Errorf("accounted %s (%v), want %s", amountsText(b), err, amountsText(a))
	}
	if res, q := firstAmount(a); res != v1.ResourceCPU || q.Cmp(resource.MustParse("6")) != 0 {
		t.Errorf("first amount %s %s, want cpu 6", res, q.String())
	}
	if _, err := accounted(pod, "other"); err == nil || !strings.Contains(err.Error(), "no entry for claim other") {
		t.Errorf("a claim without an entry: %v", err)
	}
}

// A mapping by capacity is the consumed capacity times the multiplier, as
// the API defines it: nothing where the allocation consumed none of the
// key (never the device's whole capacity), an error where it records no
// consumed capacity, and no overflow where the product passes int64's
// milli-units.
func TestDeclaredMappingByCapacityAsTheAPISays(t *testing.T) {
	dev := resourceapi.Device{
		Name:     "socket-0",
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("2Pi")}, "cores": {Value: resource.MustParse("64")}},
		NodeAllocatableResources: map[v1.ResourceName]resourceapi.NodeAllocatableResource{
			v1.ResourceMemory: {Mapping: &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName]("memory"), CapacityMultiplier: ptr.To(resource.MustParse("3000"))}},
		},
	}
	for _, c := range []struct {
		name     string
		consumed map[resourceapi.QualifiedName]resource.Quantity
		want     string
		err      string
	}{
		{name: "consumed", consumed: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("1Pi")},
			// 1Pi × 3000: 3.4e18 bytes, 3.4e21 milli-units.
			want: "mapped 3000Pi memory"},
		{name: "another key consumed", consumed: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("4")}, want: "nothing"},
		{name: "no consumed capacity", err: "records no consumed capacity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := declared(dev, resourceapi.DeviceRequestAllocationResult{Pool: "p", Device: "socket-0", ConsumedCapacity: c.consumed}, 1)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %s, %v; want an error saying %q", amountsText(a), err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := amountsText(a); got != c.want {
				t.Errorf("declared %q, want %q", got, c.want)
			}
		})
	}
}
