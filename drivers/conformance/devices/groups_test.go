package devices

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Free and Together follow the allocator's compatibility-group rule: on a
// counter set, devices go together only if all share a group, and a device
// of no group only with others of none.
func TestFreeKeepsCompatibilityGroupsApart(t *testing.T) {
	dev := func(name string, counter string, groups ...string) resourceapi.Device {
		return resourceapi.Device{Name: name, ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
			CounterSet: "set", Counters: map[string]resourceapi.Counter{counter: {Value: resource.MustParse("1")}}, CompatibilityGroups: groups,
		}}}
	}
	one := resource.MustParse("1")
	slice := resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "d", NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: "p", ResourceSliceCount: 1},
			SharedCounters: []resourceapi.CounterSet{{Name: "set", Counters: map[string]resourceapi.Counter{"m0": {Value: one}, "m1": {Value: one}, "t0": {Value: one}, "t1": {Value: one}, "w": {Value: one}}}},
			Devices: []resourceapi.Device{
				dev("mig-0", "m0", "mig"), dev("mig-1", "m1", "mig"),
				dev("ts-0", "t0", "time-sliced"), dev("ts-1", "t1", "time-sliced"),
				dev("plain", "w"),
			},
		},
	}
	names := func(ds []Device) (out []string) {
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return out
	}
	empty := &State{Slices: []resourceapi.ResourceSlice{slice}}
	if got := names(empty.Together(empty.Free("d", ""), 5)); len(got) != 2 || got[0] != "mig-0" || got[1] != "mig-1" {
		t.Errorf("together on an empty counter set: %v, want the two MIG devices, first fit", got)
	}
	held := &State{Slices: []resourceapi.ResourceSlice{slice}, Claims: []resourceapi.ResourceClaim{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: "d", Pool: "p", Device: "ts-0"}},
		}}},
	}}}
	if got := names(held.Free("d", "")); len(got) != 1 || got[0] != "ts-1" {
		t.Errorf("free beside a time-sliced share: %v, want ts-1 only", got)
	}
}
