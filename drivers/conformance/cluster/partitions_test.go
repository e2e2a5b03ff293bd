package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// partitionedGPU is a GPU of four memory slices, published whole (gpu-0,
// all four), as four one-slice partitions and two two-slice ones, all
// drawing from counter set gpu-0-counters: four one-slice partitions fit,
// and then nothing else does.
func partitionedGPU() ([]resourceapi.Device, resourceapi.CounterSet) {
	const slices = 4
	set := resourceapi.CounterSet{Name: "gpu-0-counters", Counters: map[string]resourceapi.Counter{}}
	for i := range slices {
		set.Counters[fmt.Sprintf("memory-slice-%d", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	part := func(name string, size, start int) resourceapi.Device {
		counters := map[string]resourceapi.Counter{}
		for i := start; i < start+size; i++ {
			counters[fmt.Sprintf("memory-slice-%d", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
		}
		return resourceapi.Device{
			Name:             name,
			Attributes:       map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"size": {IntValue: ptr.To(int64(size))}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: counters}},
		}
	}
	devices := []resourceapi.Device{part("gpu-0", slices, 0)}
	for i := range slices {
		devices = append(devices, part(fmt.Sprintf("gpu-0-small-%d", i), 1, i))
	}
	devices = append(devices, part("gpu-0-big-0", 2, 0), part("gpu-0-big-2", 2, 2))
	return devices, set
}

func withPartitions(k *kit, selector string) {
	k.m.Capabilities = map[manifest.Capability]bool{manifest.DRAPartitionableDevices: true}
	k.m.Partitions = &manifest.Partitions{DeviceClass: fakeDriver, Selector: selector,
		Proof: &manifest.Proof{Env: &manifest.EnvProof{Name: "GPU_DEVICE_0", Pattern: "^gpu-[0-9]+(-[a-z]+-[0-9]+)?$"}, Names: "{device}"}}
}

// With a scheduler that honours counters, four one-slice partitions run,
// the fifth waits, and runs once one is freed.
func TestPartitionsUntilTheCountersAreExhausted(t *testing.T) {
	devices, set := partitionedGPU()
	f, k := newFakeClusterOf(t, refuseWithEvent, devices, set)
	withPartitions(k, `device.attributes["gpu.example.com"].size == 1`)
	ctx := context.Background()
	if err := k.partitions(ctx, t.Logf, k); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range 4 {
		if d := fmt.Sprintf("%s/%s/gpu-0-small-%d", fakeDriver, fakeNode, i); !f.allocated[d] {
			t.Errorf("%s was never allocated; allocated: %v", d, f.allocated)
		}
	}
	for _, d := range []string{"gpu-0", "gpu-0-big-0", "gpu-0-big-2"} {
		if f.allocated[fakeDriver+"/"+fakeNode+"/"+d] {
			t.Errorf("%s was allocated: the check asks for one-slice partitions only", d)
		}
	}
}

// A scheduler that ignores counters overcommits them: the check fails,
// naming the counters.
func TestPartitionsFailOnOvercommit(t *testing.T) {
	devices, set := partitionedGPU()
	f, k := newFakeClusterOf(t, refuseWithEvent, devices, set)
	f.ignoreCounters.Store(true)
	withPartitions(k, `device.attributes["gpu.example.com"].size <= 2`)
	err := k.partitions(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "overcommit in pool node-a") || !strings.Contains(err.Error(), "gpu-0-counters/memory-slice-0: 2 consumed of 1") {
		t.Fatalf("got %v, want the overcommit of gpu-0-counters named", err)
	}
}

// Devices that consume no counters are no partitions.
func TestPartitionsNeedCounters(t *testing.T) {
	_, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(2, true))
	withPartitions(k, "")
	err := k.partitions(context.Background(), t.Logf, k)
	if skip := (skipCheck{}); !errors.As(err, &skip) || !strings.Contains(err.Error(), "consume counters: nothing to partition") {
		t.Fatalf("got %v, want the check not made (nothing to check it on), no partitions found", err)
	}
}

// sharedGPUs are two GPUs of 24Gi that allow multiple allocations.
func sharedGPUs(memory string) []resourceapi.Device {
	devices := fakeDevices(2, true)
	for i := range devices {
		devices[i].AllowMultipleAllocations = ptr.To(true)
		devices[i].Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}}
	}
	return devices
}

func withShares(k *kit, request string) {
	k.m.Capabilities = map[manifest.Capability]bool{manifest.DRAConsumableCapacity: true}
	k.m.Shares = &manifest.Shares{DeviceClass: fakeDriver, Request: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(request)}}
}

// Two claims of 8Gi share one 24Gi GPU, the one their selector pins.
func TestSharesOneDevice(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, sharedGPUs("24Gi"))
	withShares(k, "8Gi")
	if err := k.shares(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.allocated) != 1 {
		t.Errorf("allocated %v, want both claims on one device", f.allocated)
	}
}

// Shares with one shareID are one allocation twice: the check fails.
func TestSharesFailWithOneShareID(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, sharedGPUs("24Gi"))
	f.oneShareID.Store(true)
	withShares(k, "8Gi")
	err := k.shares(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "with the same shareID share-0") {
		t.Fatalf("got %v, want the same shareID reported", err)
	}
}

// Without a device that allows multiple allocations with room for two
// requests, the check fails saying why.
func TestSharesNeedRoomForTwo(t *testing.T) {
	cases := []struct {
		name    string
		devices []resourceapi.Device
		want    string
	}{
		{"too small", sharedGPUs("12Gi"), "node-a/gpu-0 has 12Gi of memory, less than two requests"},
		{"exclusive", fakeDevices(2, true), "no device of class gpu.example.com allows multiple allocations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, k := newFakeClusterOf(t, refuseWithEvent, c.devices)
			withShares(k, "8Gi")
			err := k.shares(context.Background(), t.Logf, k)
			if skip := (skipCheck{}); !errors.As(err, &skip) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want the check not made, saying %q", err, c.want)
			}
		})
	}
}

// A capability enabled but not checked fails the run; one not enabled is
// skipped; one checked runs.
func TestGateFailsWhatItCannotVerify(t *testing.T) {
	m := &manifest.Manifest{Capabilities: map[manifest.Capability]bool{manifest.DRAResourceClaimDeviceStatus: true, manifest.DRAPartitionableDevices: true}}
	cases := []struct {
		capability manifest.Capability
		checked    bool
		skip, fail string
	}{
		{manifest.DRAResourceClaimDeviceStatus, false, "", "the manifest enables DRAResourceClaimDeviceStatus, but this suite has no check for it: it is not verified"},
		{manifest.DRADeviceBindingConditions, true, "the manifest does not enable DRADeviceBindingConditions", ""},
		{manifest.DRAPartitionableDevices, true, "", ""},
		{manifest.DRAConsumableCapacity, true, "the manifest does not enable DRAConsumableCapacity", ""},
		{"", true, "", ""},
	}
	for _, c := range cases {
		skip, fail := gate(m, c.capability, c.checked)
		if skip != c.skip || !strings.HasPrefix(fail, c.fail) || (c.fail == "") != (fail == "") {
			t.Errorf("gate(%q, checked %v) = skip %q, fail %q; want skip %q, fail %q…", c.capability, c.checked, skip, fail, c.skip, c.fail)
		}
	}
}
