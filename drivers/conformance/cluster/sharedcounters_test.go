package cluster

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A device that allows multiple allocations and consumes counters, shared
// by two claims (two results, distinct shareIDs), consumes its counters
// once, as Kubernetes' allocator charges them: the pool's 80Gi are used
// up, not overcommitted. An exclusive device beside it still overcommits
// them, by what the two devices consume, each once.
func TestRemainingChargesASharedDeviceOnce(t *testing.T) {
	gi := func(q string) map[string]resourceapi.Counter {
		return map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(q)}}
	}
	p := &pool{node: fakeNode, name: fakeNode, counters: map[string]map[string]resource.Quantity{"gpu-0": {"memory": resource.MustParse("80Gi")}}}
	for _, d := range []resourceapi.Device{
		{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true), ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: gi("80Gi")}}},
		{Name: "gpu-0-half", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: gi("40Gi")}}},
	} {
		p.devices = append(p.devices, device{driver: fakeDriver, pool: fakeNode, dev: d})
	}
	share := func(id string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "share", Driver: fakeDriver, Pool: fakeNode, Device: "gpu-0", ShareID: ptr.To(types.UID(id))}
	}
	left, err := p.remaining([]resourceapi.DeviceRequestAllocationResult{share("a"), share("b")})
	if err != nil {
		t.Fatalf("two shares of gpu-0: %v; want no overcommit, the device's 80Gi charged once", err)
	}
	if q := left["gpu-0"]["memory"]; q.Sign() != 0 {
		t.Errorf("two shares of gpu-0 leave %s of gpu-0/memory, want 0", q.String())
	}
	half := resourceapi.DeviceRequestAllocationResult{Request: "part", Driver: fakeDriver, Pool: fakeNode, Device: "gpu-0-half"}
	_, err = p.remaining([]resourceapi.DeviceRequestAllocationResult{share("a"), half, share("b")})
	if err == nil || !strings.Contains(err.Error(), "gpu-0/memory: 120Gi consumed of 80Gi") {
		t.Errorf("two shares of gpu-0 and gpu-0-half: %v; want the overcommit of 120Gi (80Gi once, 40Gi) named", err)
	}
}

// sharedPartitions is partitionedGPU with every partition allowing two
// allocations: each has a memory capacity of 2, and a share takes 1 by
// default.
func sharedPartitions() ([]resourceapi.Device, resourceapi.CounterSet) {
	devices, set := partitionedGPU()
	for i := range devices {
		devices[i].AllowMultipleAllocations = ptr.To(true)
		devices[i].Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {
			Value:         resource.MustParse("2"),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("1"))},
		}}
	}
	return devices, set
}

// A driver whose partitions allow multiple allocations passes the
// partitions check: the scheduler, as Kubernetes', gives the first two
// claims shares of the whole GPU, whose counters it charges once, so every
// other partition waits on them and the third claim on the whole GPU's
// capacity; freeing one share lets it run.
func TestPartitionsSharedByTwoClaims(t *testing.T) {
	devices, set := sharedPartitions()
	f, k := newFakeClusterOf(t, refuseWithEvent, devices, set)
	withPartitions(k, `device.attributes["gpu.example.com"].size >= 1`)
	if err := k.partitions(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := fakeDriver + "/" + fakeNode + "/gpu-0"; len(f.allocated) != 1 || !f.allocated[want] {
		t.Errorf("allocated %v, want only %s, shared by the claims", f.allocated, want)
	}
}
