package allocation

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const drv = "gpu.dralab.dev"

func claimOn(name, device string, consumed map[resourceapi.QualifiedName]resource.Quantity) resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: drv, Pool: "n", Device: device, ConsumedCapacity: consumed}
	if consumed != nil {
		r.ShareID = ptr.To[types.UID]("s-" + types.UID(name))
	}
	return resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}},
	}
}

func consumes(set string, counters map[string]string) []resourceapi.DeviceCounterConsumption {
	c := map[string]resourceapi.Counter{}
	for k, v := range counters {
		c[k] = resourceapi.Counter{Value: resource.MustParse(v)}
	}
	return []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: c}}
}

func snapshot(devices []resourceapi.Device, claims ...resourceapi.ResourceClaim) *Snapshot {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "any"}}
	return &Snapshot{
		AllClaims: claims,
		Classes:   map[string]*resourceapi.DeviceClass{"any": class},
		Slices: []resourceapi.ResourceSlice{
			{Spec: resourceapi.ResourceSliceSpec{Driver: drv, Pool: resourceapi.ResourcePool{Name: "n", ResourceSliceCount: 2}, SharedCounters: []resourceapi.CounterSet{{
				Name: "gpu-0-counters", Counters: map[string]resourceapi.Counter{"slice-0": {Value: resource.MustParse("1")}, "slice-1": {Value: resource.MustParse("1")}},
			}}}},
			{Spec: resourceapi.ResourceSliceSpec{Driver: drv, Pool: resourceapi.ResourcePool{Name: "n", ResourceSliceCount: 2}, Devices: devices}},
		},
	}
}

func named(name string) alternative {
	return alternative{name: "gpu", class: "any", count: 1, selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["` + drv + `"].name == "` + name + `"`}}}}
}

func withName(d resourceapi.Device) resourceapi.Device {
	d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"name": {StringValue: ptr.To(d.Name)}}
	return d
}

// A free whole GPU whose counters a slice holds is CounterExhausted, naming
// the counter and its holder; a taken slice is AllAllocated, as before.
func TestWhyCounterExhausted(t *testing.T) {
	s := snapshot([]resourceapi.Device{
		withName(resourceapi.Device{Name: "mig-0", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-0": "1"})}),
		withName(resourceapi.Device{Name: "gpu-0", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-0": "1", "slice-1": "1"})}),
	}, claimOn("small", "mig-0", nil))
	holders := s.AllocatedDevices()
	code, msg, err := s.whyAlternatives(context.Background(), "ns", "whole", []alternative{named("gpu-0")}, holders)
	if err != nil || code != CounterExhausted || !strings.Contains(msg, "n/gpu-0 needs 1 of counter slice-0 of gpu-0-counters, which has 1: 1 held by small") {
		t.Errorf("whole GPU: %s %q %v", code, msg, err)
	}
	if code, msg, _ := s.whyAlternatives(context.Background(), "ns", "slice", []alternative{named("mig-0")}, holders); code != AllAllocated {
		t.Errorf("taken slice: %s %q", code, msg)
	}
}

// A shared device is not "allocated" to one claim: one more share that does
// not fit is CapacityExhausted, one larger than a share may be is
// NoMatchingDevice, one that fits has no reason.
func TestWhyCapacity(t *testing.T) {
	gi := func(s string) resource.Quantity { return resource.MustParse(s) }
	l4 := withName(resourceapi.Device{Name: "l4", AllowMultipleAllocations: ptr.To(true), Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"memory": {Value: gi("23034Mi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(gi("22Gi")),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(gi("1Gi")), Max: ptr.To(gi("22Gi"))}}},
		"multiprocessors": {Value: gi("58"), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(gi("0"))}},
	}})
	mem := func(q string) map[resourceapi.QualifiedName]resource.Quantity {
		return map[resourceapi.QualifiedName]resource.Quantity{"memory": gi(q)}
	}
	s := snapshot([]resourceapi.Device{l4}, claimOn("a", "l4", mem("7Gi")), claimOn("b", "l4", mem("7Gi")))
	holders := s.AllocatedDevices()
	ask := func(q string) alternative { a := named("l4"); a.capacity = mem(q); return a }
	if code, msg, _ := s.whyAlternatives(context.Background(), "ns", "third", []alternative{ask("7Gi")}, holders); code != "" {
		t.Errorf("a third 7Gi share fits, got %s %q", code, msg)
	}
	if code, msg, _ := s.whyAlternatives(context.Background(), "ns", "big", []alternative{ask("9Gi")}, holders); code != CapacityExhausted ||
		!strings.Contains(msg, "n/l4 has 23034Mi of memory, 14Gi consumed by a, b; 9Gi more does not fit") {
		t.Errorf("9Gi beside two 7Gi: %s %q", code, msg)
	}
	if code, msg, _ := s.whyAlternatives(context.Background(), "ns", "huge", []alternative{ask("30Gi")}, holders); code != NoMatchingDevice ||
		!strings.Contains(msg, "30Gi of memory asked, one share may take at most 22Gi") {
		t.Errorf("30Gi: %s %q", code, msg)
	}
}

// FreePartitions counts what the counters still allow, not the devices:
// two one-slice devices and a two-slice one, with one one-slice device
// allocated, leave one of each size that fits: one 1g, no 2g.
func TestFreePartitions(t *testing.T) {
	mig := func(name, profile string, slices ...string) resourceapi.Device {
		c := map[string]string{}
		for _, sl := range slices {
			c[sl] = "1"
		}
		d := withName(resourceapi.Device{Name: name, ConsumesCounters: consumes("gpu-0-counters", c)})
		d.Attributes["profile"] = resourceapi.DeviceAttribute{StringValue: ptr.To(profile)}
		return d
	}
	devices := []resourceapi.Device{mig("a", "1g", "slice-0"), mig("b", "1g", "slice-1"), mig("ab", "2g", "slice-0", "slice-1")}
	profiles := func(s *Snapshot) *Snapshot { s.Vocabulary.ProfileAttribute = "profile"; return s }
	if got := profiles(snapshot(devices)).FreePartitions(); got["1g"] != 2 || got["2g"] != 1 {
		t.Errorf("idle: %v, want 1g: 2, 2g: 1", got)
	}
	// A reader whose vocabulary names no profile attribute counts no
	// partitions: it cannot tell them apart.
	if got := snapshot(devices).FreePartitions(); len(got) != 0 {
		t.Errorf("without a profile attribute: %v, want none", got)
	}
	if got := profiles(snapshot(devices, claimOn("x", "a", nil))).FreePartitions(); got["1g"] != 1 || got["2g"] != 0 {
		t.Errorf("one 1g allocated: %v, want 1g: 1, 2g: 0", got)
	}
}

// A free share whose counters have room, on a counter set where a MIG
// device of another group is allocated, is IncompatibleGroups, naming the
// device and its claim; a second MIG device of the same group fits, and
// the whole GPU, of no group, is kept out by counters first.
func TestWhyIncompatibleGroups(t *testing.T) {
	grouped := func(d resourceapi.Device, groups ...string) resourceapi.Device {
		d.ConsumesCounters[0].CompatibilityGroups = groups
		return withName(d)
	}
	s := snapshot([]resourceapi.Device{
		grouped(resourceapi.Device{Name: "mig-0", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-0": "1"})}, "mig"),
		grouped(resourceapi.Device{Name: "mig-1", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-1": "1"})}, "mig"),
		grouped(resourceapi.Device{Name: "ts-0", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"time-slices": "1"})}, "time-sliced"),
		grouped(resourceapi.Device{Name: "both", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"time-slices": "1"})}, "time-sliced", "mig"),
		withName(resourceapi.Device{Name: "gpu-0", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"time-slices": "1"})}),
	}, claimOn("small", "mig-0", nil))
	s.Slices[0].Spec.SharedCounters[0].Counters["time-slices"] = resourceapi.Counter{Value: resource.MustParse("2")}
	holders := s.AllocatedDevices()
	ctx := context.Background()
	code, msg, err := s.whyAlternatives(ctx, "ns", "share", []alternative{named("ts-0")}, holders)
	if want := "n/ts-0 (group time-sliced) shares no compatibility group with what is allocated on counter set gpu-0-counters: mig-0 (group mig) of small"; err != nil || code != IncompatibleGroups || !strings.Contains(msg, want) {
		t.Errorf("share: %s %q %v, want %s: %q", code, msg, err, IncompatibleGroups, want)
	}
	// Where the slices name partition types, the explanation says what a
	// pool status would count: the share fits by counters.
	s.Slices[1].Spec.PartitionTypeAttribute = ptr.To(resourceapi.FullyQualifiedName(drv + "/partitionType"))
	for i := range s.Slices[1].Spec.Devices {
		d := &s.Slices[1].Spec.Devices[i]
		d.Attributes["partitionType"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.Name)}
	}
	if _, msg, _ := s.whyAlternatives(ctx, "ns", "share", []alternative{named("ts-0")}, holders); !strings.Contains(msg, "(a ResourcePoolStatusRequest counts 1 of them allocatable: it weighs counters, not compatibility groups)") {
		t.Errorf("with partition types: %q", msg)
	}
	for _, fits := range []string{"mig-1", "both"} {
		if code, msg, _ := s.whyAlternatives(ctx, "ns", fits, []alternative{named(fits)}, holders); code != "" {
			t.Errorf("%s shares group mig with mig-0, yet: %s %q", fits, code, msg)
		}
	}
	if code, msg, _ := s.whyAlternatives(ctx, "ns", "whole", []alternative{named("gpu-0")}, holders); code != IncompatibleGroups || !strings.Contains(msg, "n/gpu-0 (no group)") {
		t.Errorf("a device of no group beside a grouped one: %s %q", code, msg)
	}
	// Two holders whose groups meet only in one that the candidate lacks:
	// neither keeps it out alone, both together do.
	s = snapshot([]resourceapi.Device{
		grouped(resourceapi.Device{Name: "a", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-0": "1"})}, "x", "y"),
		grouped(resourceapi.Device{Name: "b", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-1": "1"})}, "y", "z"),
		grouped(resourceapi.Device{Name: "c", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"time-slices": "1"})}, "x", "z"),
	}, claimOn("one", "a", nil), claimOn("two", "b", nil))
	s.Slices[0].Spec.SharedCounters[0].Counters["time-slices"] = resourceapi.Counter{Value: resource.MustParse("2")}
	if code, msg, _ := s.whyAlternatives(ctx, "ns", "c", []alternative{named("c")}, s.AllocatedDevices()); code != IncompatibleGroups || !strings.Contains(msg, "a (groups x, y) of one, b (groups y, z) of two") {
		t.Errorf("groups in common only pairwise: %s %q", code, msg)
	}
}
