package kit

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reachedDevices are a node's own GPU and two devices of a pool the node
// reaches but does not own (network-attached, published by a controller).
func reachedDevices() staticInventory {
	return staticInventory{
		{API: resourceapi.Device{Name: "gpu-0"}, Env: map[string]string{"": "gpu-0"}},
		{API: resourceapi.Device{Name: "fabric-0"}, Env: map[string]string{"": "fabric-0"}, Pool: "rack-a"},
		{API: resourceapi.Device{Name: "fabric-1"}, Env: map[string]string{"": "fabric-1"}, Pool: "rack-a"},
	}
}

// A plugin prepares a device of a pool it does not own when the claim has
// it of that pool, and refuses it of any other pool (its own included); it
// publishes only its own devices, and the kubelet's health stream names each
// device's pool.
func TestDevicesOfAPoolTheNodeReaches(t *testing.T) {
	h := newHarness(t, 0, func(o *Options) { o.Inventory = reachedDevices(); o.ReportHealth = true })
	s := publishedSlice(t, h)
	if s.Spec.Pool.Name != testNode || len(s.Spec.Devices) != 1 || s.Spec.Devices[0].Name != "gpu-0" {
		t.Errorf("published %s with %v; want the node's pool with gpu-0 only", s.Spec.Pool.Name, s.Spec.Devices)
	}

	ok := h.claim("reached")
	ok.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: testDriver, Pool: testNode, Device: "gpu-0"},
		{Request: "fabric", Driver: testDriver, Pool: "rack-a", Device: "fabric-1"},
	}
	ok = h.updateStatus(ok)
	res := h.prepare(ok)[string(ok.UID)]
	if res.Error != "" || len(res.Devices) != 2 {
		t.Fatalf("prepare = %+v; want both devices", res)
	}
	for _, d := range res.Devices {
		want := map[string]string{"gpu-0": testNode, "fabric-1": "rack-a"}[d.DeviceName]
		if d.PoolName != want {
			t.Errorf("device %s prepared of pool %q, want %q", d.DeviceName, d.PoolName, want)
		}
	}

	for _, pool := range []string{testNode, "rack-b"} {
		bad := h.claim("wrong-pool-" + pool)
		bad.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "fabric", Driver: testDriver, Pool: pool, Device: "fabric-0"}}
		bad = h.updateStatus(bad)
		res := h.prepare(bad)[string(bad.UID)]
		if !strings.Contains(res.Error, `is in pool "`+pool+`", not in the pool "rack-a"`) {
			t.Errorf("fabric-0 of pool %s: error %q, want the pool named", pool, res.Error)
		}
	}

	report, _ := h.driver.healthReport()
	pools := map[string]string{}
	for _, d := range report.Devices {
		pools[d.DeviceName] = d.PoolName
	}
	if pools["gpu-0"] != testNode || pools["fabric-0"] != "rack-a" || pools["fabric-1"] != "rack-a" {
		t.Errorf("health stream pools %v", pools)
	}
	if missing, err := h.driver.unpublished(context.Background()); err != nil || len(missing) != 0 {
		t.Errorf("unpublished = %v, %v; the other pool's devices are not the node's to publish", missing, err)
	}
}

// A plugin that has only devices of other pools publishes no pool of its
// own; one whose other-pool device consumes counters is refused, since
// counters are published with the pool, by its publisher.
func TestOnlyDevicesOfOtherPools(t *testing.T) {
	h := newHarness(t, 0, func(o *Options) { o.Inventory = reachedDevices()[1:] })
	time.Sleep(300 * time.Millisecond)
	if list, err := h.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("slices %v (%v); want none", list, err)
	}
	if res := h.driver.resources(); len(res.Pools) != 0 {
		t.Errorf("resources = %v, want no pool", res.Pools)
	}

	inv := reachedDevices()
	inv[1].API.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "set", Counters: map[string]resourceapi.Counter{}}}
	o := newHarness(t, 1).opts
	o.Inventory, o.CheckpointPath = inv, o.CheckpointPath+".2"
	if _, err := newDriver(context.Background(), o); err == nil || !strings.Contains(err.Error(), `device "fabric-0" of pool "rack-a" consumes counters`) {
		t.Errorf("newDriver = %v; want the counters refused", err)
	}
}
