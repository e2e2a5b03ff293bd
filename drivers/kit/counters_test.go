package kit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// partitioned is a counter inventory: each of gpus GPUs has a counter set
// of two memory slices, and three devices: its two halves and itself.
type partitioned struct {
	staticInventory
	sets []resourceapi.CounterSet
}

func (p partitioned) CounterSets(context.Context) ([]resourceapi.CounterSet, error) {
	return p.sets, nil
}

// slicesCounters is one of each named counter.
func slicesCounters(names ...string) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{}
	for _, n := range names {
		c[n] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return c
}

func partitionedGPUs(gpus int) partitioned {
	var inv partitioned
	for i := range gpus {
		set := fmt.Sprintf("gpu-%d-counters", i)
		inv.sets = append(inv.sets, resourceapi.CounterSet{Name: set, Counters: slicesCounters("slice-0", "slice-1")})
		for _, part := range []struct {
			name   string
			slices []string
		}{{"half-0", []string{"slice-0"}}, {"half-1", []string{"slice-1"}}, {"", []string{"slice-0", "slice-1"}}} {
			name := fmt.Sprintf("gpu-%d", i)
			if part.name != "" {
				name += "-" + part.name
			}
			inv.staticInventory = append(inv.staticInventory, Device{
				API: resourceapi.Device{Name: name, ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: slicesCounters(part.slices...)}}},
				Env: map[string]string{"": name},
			})
		}
	}
	return inv
}

func apiDevices(inv staticInventory) []resourceapi.Device {
	var out []resourceapi.Device
	for _, d := range inv {
		out = append(out, d.API)
	}
	return out
}

func deviceNames(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

// Counter sets go in slices of their own, eight at most; devices that
// consume counters in slices of 64 at most (128 without counters), one
// GPU's devices never split across slices, in the inventory's order.
func TestSlicesKeepTheAPILimits(t *testing.T) {
	// 30 GPUs of 3 devices: 90 devices, 21 per slice of 64 at most.
	inv := partitionedGPUs(30)
	got, err := Slices(apiDevices(inv.staticInventory), inv.sets)
	if err != nil {
		t.Fatal(err)
	}
	var sets, devs []string
	for i, s := range got {
		if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
			t.Errorf("slice %d has counters and devices", i)
		}
		if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("slice %d has %d counter sets", i, len(s.SharedCounters))
		}
		if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d has %d devices that consume counters", i, len(s.Devices))
		}
		for _, cs := range s.SharedCounters {
			sets = append(sets, cs.Name)
		}
		gpus := map[string]bool{}
		for _, d := range s.Devices {
			devs = append(devs, d.Name)
			gpus[d.ConsumesCounters[0].CounterSet] = true
		}
		if len(s.Devices) > 0 && len(s.Devices) != 3*len(gpus) {
			t.Errorf("slice %d holds part of a GPU: %v", i, deviceNames(s.Devices))
		}
	}
	// 30 sets: 8+8+8+6; 90 devices of 3: 63+27.
	if len(got) != 6 {
		t.Errorf("%d slices, want 4 of counter sets and 2 of devices", len(got))
	}
	if want := deviceNames(apiDevices(inv.staticInventory)); !slices.Equal(devs, want) {
		t.Errorf("devices published in another order:\n%v\nwant\n%v", devs, want)
	}
	if len(sets) != 30 {
		t.Errorf("counter sets published: %v", sets)
	}

	// Without counters: 128 a slice.
	plain, err := Slices(apiDevices(testDevices(200)), nil)
	if err != nil || len(plain) != 2 || len(plain[0].Devices) != 128 || len(plain[1].Devices) != 72 {
		t.Errorf("200 plain devices: %d slices, %v", len(plain), err)
	}
	// One counter set consumed by more devices than a slice holds.
	big := partitioned{sets: []resourceapi.CounterSet{{Name: "big", Counters: slicesCounters("c")}}}
	for i := range 70 {
		big.staticInventory = append(big.staticInventory, Device{API: resourceapi.Device{Name: fmt.Sprintf("d-%d", i),
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "big", Counters: slicesCounters("c")}}}})
	}
	split, err := Slices(apiDevices(big.staticInventory), big.sets)
	if err != nil || len(split) != 3 || len(split[1].Devices) != 64 || len(split[2].Devices) != 6 {
		t.Errorf("70 devices of one counter set: %d slices, %v", len(split), err)
	}
	// No devices at all: one empty slice says so.
	if empty, err := Slices(nil, nil); err != nil || len(empty) != 1 || len(empty[0].Devices) != 0 {
		t.Errorf("no devices: %+v, %v", empty, err)
	}
}

// A pool of many slices at the driver's word: at most perSlice devices a
// slice, a GPU's devices together where they fit, the counter sets apart;
// a bad count is refused.
func TestSlicesOfAFewDevicesEach(t *testing.T) {
	plain, err := SlicesOf(apiDevices(testDevices(5)), nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, s := range plain {
		sizes = append(sizes, len(s.Devices))
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Errorf("5 devices, 2 a slice: slices of %v, want [2 2 1]", sizes)
	}
	// 4 GPUs of 3 devices, 6 a slice: a counter set slice, then two GPUs
	// a slice.
	inv := partitionedGPUs(4)
	parts, err := SlicesOf(apiDevices(inv.staticInventory), inv.sets, 6)
	if err != nil {
		t.Fatal(err)
	}
	sizes = nil
	for _, s := range parts {
		sizes = append(sizes, len(s.Devices))
	}
	if !slices.Equal(sizes, []int{0, 6, 6}) || len(parts[0].SharedCounters) != 4 {
		t.Errorf("4 partitioned GPUs, 6 a slice: devices a slice %v, %d counter sets first; want [0 6 6] and 4", sizes, len(parts[0].SharedCounters))
	}
	if _, err := SlicesOf(nil, nil, -1); err == nil {
		t.Error("-1 devices a slice: no error")
	}
}

// An inventory the API or the allocator would refuse stops the driver
// with the device named: a bad slice would make the whole pool unusable.
func TestSlicesRefuseBadCounters(t *testing.T) {
	set := resourceapi.CounterSet{Name: "s", Counters: slicesCounters("a")}
	dev := func(set string, counters map[string]resourceapi.Counter) resourceapi.Device {
		return resourceapi.Device{Name: "d", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: counters}}}
	}
	many := resourceapi.CounterSet{Name: "many", Counters: map[string]resourceapi.Counter{}}
	for i := range 33 {
		many.Counters[fmt.Sprintf("c-%d", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	for name, c := range map[string]struct {
		devs []resourceapi.Device
		sets []resourceapi.CounterSet
		want string
	}{
		"unknown set":       {[]resourceapi.Device{dev("t", slicesCounters("a"))}, []resourceapi.CounterSet{set}, `device d consumes from counter set "t"`},
		"unknown counter":   {[]resourceapi.Device{dev("s", slicesCounters("b"))}, []resourceapi.CounterSet{set}, "counter b of counter set s, which has no such counter"},
		"more than the set": {[]resourceapi.Device{dev("s", map[string]resourceapi.Counter{"a": {Value: resource.MustParse("2")}})}, []resourceapi.CounterSet{set}, "consumes 2 of counter a in counter set s, which has 1"},
		"duplicate set":     {nil, []resourceapi.CounterSet{set, set}, `counter set "s" is listed twice`},
		"too many counters": {nil, []resourceapi.CounterSet{many}, "33 counters"},
		"three sets": {[]resourceapi.Device{{Name: "d", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "s"}, {CounterSet: "s"}, {CounterSet: "s"}}}},
			[]resourceapi.CounterSet{set}, "device d consumes from 3 counter sets"},
	} {
		if _, err := Slices(c.devs, c.sets); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
}

// The driver publishes the counter sets and the devices of a counter
// inventory in separate slices of one pool, each slice counting them all.
func TestPublishesCounterSets(t *testing.T) {
	var generated atomic.Int32
	h := newHarness(t, 0, func(o *Options) {
		o.Inventory = partitionedGPUs(25)
		// The fake API server does not generate names, as the real one
		// does for the slice controller's generateName.
		o.KubeClient.(*fake.Clientset).PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
			s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
			if s.Name == "" {
				s.Name = fmt.Sprintf("%s%d", s.GenerateName, generated.Add(1))
			}
			return false, nil, nil
		})
	})
	var list *resourceapi.ResourceSliceList
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		list, err = h.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 6, nil
	})
	if err != nil {
		t.Fatalf("waiting for 4 slices of counter sets and 2 of devices: %v; have %d", err, len(list.Items))
	}
	devices, sets := 0, 0
	for _, s := range list.Items {
		if s.Spec.Pool.ResourceSliceCount != 6 || s.Spec.Pool.Name != testNode {
			t.Errorf("slice %s: pool %+v, want %s of 6 slices", s.Name, s.Spec.Pool, testNode)
		}
		devices += len(s.Spec.Devices)
		sets += len(s.Spec.SharedCounters)
	}
	if devices != 75 || sets != 25 {
		t.Errorf("published %d devices and %d counter sets, want 75 and 25", devices, sets)
	}
}

// A prepare that would overcommit a counter (a stale allocation of a whole
// GPU beside one of its halves) is refused with the holder named; freed
// counters can be taken again.
func TestPrepareRefusesOvercommittedCounters(t *testing.T) {
	h := newHarness(t, 0, func(o *Options) { o.Inventory = partitionedGPUs(1) })
	half0, whole, half1 := h.claim("half0", "gpu-0-half-0"), h.claim("whole", "gpu-0"), h.claim("half1", "gpu-0-half-1")
	if got := h.prepare(half0)[string(half0.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	got := h.prepare(whole)[string(whole.UID)]
	if !strings.Contains(got.Error, "counter slice-0 of counter set gpu-0-counters") || !strings.Contains(got.Error, "gpu-0-half-0 (claim ns/half0)") {
		t.Errorf("whole GPU beside its half: %q, want a refusal naming slice-0 and claim ns/half0", got.Error)
	}
	if got := h.prepare(half1)[string(half1.UID)]; got.Error != "" {
		t.Errorf("the other half: %s", got.Error)
	}
	h.unprepare(half0, half1)
	if got := h.prepare(whole)[string(whole.UID)]; got.Error != "" {
		t.Errorf("whole GPU once its halves are free: %s", got.Error)
	}
}

// share is one allocation result on a device several claims share.
type share struct {
	device, id, memory string
}

// shareClaim creates a claim whose results are shares of devices.
func (h *harness) shareClaim(name string, shares ...share) *resourceapi.ResourceClaim {
	h.t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, s := range shares {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("gpu-%d", i), Driver: testDriver, Pool: testNode, Device: s.device,
			ShareID:          ptr.To(types.UID(s.id)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(s.memory)},
		})
	}
	c, err := h.client.ResourceV1().ResourceClaims("ns").Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// Shares of one device are prepared each on its own: CDI devices and
// checkpoint entries by device and share ID, the share's memory in its
// container's environment; one is unprepared without touching the other,
// and a restarted driver remembers both.
func TestSharesArePreparedByShareID(t *testing.T) {
	h := newHarness(t, 1)
	const idA, idB1, idB2 = "6f1c1a2e-0000-4000-8000-00000000000a", "6f1c1a2e-0000-4000-8000-0000000000b1", "6f1c1a2e-0000-4000-8000-0000000000b2"
	a := h.shareClaim("a", share{"gpu-0", idA, "8Gi"})
	// One claim may hold two shares of one device (two requests).
	b := h.shareClaim("b", share{"gpu-0", idB1, "4Gi"}, share{"gpu-0", idB2, "2Gi"})
	res := h.prepare(a, b)
	resA, resB := res[string(a.UID)], res[string(b.UID)]
	if resA.Error != "" || resB.Error != "" {
		t.Fatalf("prepare: %q, %q", resA.Error, resB.Error)
	}
	ids := map[string]bool{}
	for _, r := range []*resourceapi.ResourceClaim{a, b} {
		for _, d := range res[string(r.UID)].Devices {
			if ids[d.CdiDeviceIds[0]] {
				t.Errorf("CDI device %s given twice", d.CdiDeviceIds[0])
			}
			ids[d.CdiDeviceIds[0]] = true
		}
	}
	if len(ids) != 3 {
		t.Errorf("three shares got CDI devices %v", ids)
	}
	if id := resB.Devices[1].GetShareId(); id != idB2 {
		t.Errorf("second share of claim b reported as share %q, want %s", id, idB2)
	}
	envB := strings.Join(h.containerEnv(cdiIDs(resB)), "\n") + "\n"
	for _, want := range []string{"GPU_DEVICE_0=gpu-0\n", "GPU_DEVICE_0_MEMORY_LIMIT=4Gi\n", "GPU_DEVICE_0_SHARE_ID=" + idB1, "GPU_DEVICE_1_MEMORY_LIMIT=2Gi\n", "GPU_DEVICE_1_SHARE_ID=" + idB2} {
		if !strings.Contains(envB, want) {
			t.Errorf("claim b's container lacks %s:\n%s", strings.TrimSpace(want), envB)
		}
	}

	h.restart()
	if got := h.driver.PreparedClaims(); len(got) != 2 {
		t.Fatalf("after restart the driver remembers %v", got)
	}
	cp, err := ReadCheckpoint(h.opts.CheckpointPath)
	if err != nil {
		t.Fatal(err)
	}
	if d := cp.Claims[b.UID].Devices[1]; d.ShareID != idB2 || ptr.To(d.ConsumedCapacity["memory"]).String() != "2Gi" || !d.Shared {
		t.Errorf("checkpointed share = %+v, want share %s of 2Gi", d, idB2)
	}
	if got := h.prepare(b)[string(b.UID)]; fmt.Sprint(got.Devices) != fmt.Sprint(resB.Devices) {
		t.Errorf("prepare after restart = %v, want %v", got.Devices, resB.Devices)
	}

	if got := h.unprepare(a)[string(a.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if env := strings.Join(h.containerEnv(cdiIDs(resB)), "\n"); !strings.Contains(env, "GPU_DEVICE_1_SHARE_ID="+idB2) {
		t.Errorf("claim b's shares after claim a's unprepare:\n%s", env)
	}
	if files := h.specFiles(); len(files) != 2 {
		t.Errorf("CDI specs with claim b prepared: %v, want b's and the node's", files)
	}
	if got := h.unprepare(b)[string(b.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if files := h.specFiles(); len(files) != 0 {
		t.Errorf("CDI specs left: %v", files)
	}
}
