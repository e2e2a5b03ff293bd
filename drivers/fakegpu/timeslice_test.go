package fakegpu

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/internal/slicetest"
)

func typeOf(d resourceapi.Device) string {
	return ptr.Deref(d.Attributes[gpu.AttrType].StringValue, "")
}

// A partitioned GPU offering time slices publishes its shares beside its
// MIG devices, all on the GPU's counter set, which counts the slices; the
// MIG devices and the shares declare different compatibility groups, so
// that the allocator never gives out both, and the whole GPU, declaring
// none, takes every counter. The pool is valid for the API server.
func TestTimeSlicesBesideMIG(t *testing.T) {
	inv := &Inventory{Node: "gpu-a100", Profile: mustProfile(t, "a100-80gb"), Count: 2, Partitioning: PartitioningMIG, TimeSlices: 4}
	devs, pool := published(t, inv)
	slicetest.Validate(t, gpu.DriverName, inv.Node, pool)
	sets, err := inv.CounterSets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 {
		t.Fatalf("%d counter sets, want one per GPU", len(sets))
	}
	for _, s := range sets {
		if q := s.Counters[gpu.CounterTimeSlices].Value; q.Value() != 4 {
			t.Errorf("counter set %s: %s time slices, want 4", s.Name, q.String())
		}
	}
	count := map[string]int{}
	for _, d := range devs {
		api := d.API
		count[typeOf(api)]++
		if got := ptr.Deref(api.Attributes[gpu.AttrTimeSlices].IntValue, 0); got != 4 {
			t.Errorf("%s: attribute %s = %d, want 4 on the GPU and every device of it", api.Name, gpu.AttrTimeSlices, got)
		}
		if len(api.ConsumesCounters) != 1 {
			t.Fatalf("%s consumes %d counter sets, want its GPU's", api.Name, len(api.ConsumesCounters))
		}
		cc := api.ConsumesCounters[0]
		if gpuOf := strings.SplitN(api.Name, "-", 3)[:2]; cc.CounterSet != CounterSetName(int(gpuOf[1][0]-'0')) {
			t.Errorf("%s consumes %s", api.Name, cc.CounterSet)
		}
		_, takesSlices := cc.Counters[gpu.CounterTimeSlices]
		switch typeOf(api) {
		case gpu.TypeMIG:
			if !groupsAre(cc.CompatibilityGroups, gpu.GroupMIG) || takesSlices {
				t.Errorf("MIG device %s: groups %v, takes time slices %v; want [%s] and none", api.Name, cc.CompatibilityGroups, takesSlices, gpu.GroupMIG)
			}
		case gpu.TypeTimeSlice:
			q := cc.Counters[gpu.CounterTimeSlices].Value
			if !groupsAre(cc.CompatibilityGroups, gpu.GroupTimeSliced) || len(cc.Counters) != 1 || q.Value() != 1 {
				t.Errorf("share %s: groups %v, counters %v; want [%s] and one time slice only", api.Name, cc.CompatibilityGroups, cc.Counters, gpu.GroupTimeSliced)
			}
			if mem := api.Capacity[gpu.CapacityMemory].Value; mem.Cmp(inv.Profile.Memory) != 0 {
				t.Errorf("share %s has %v of memory, want the GPU's", api.Name, api.Capacity[gpu.CapacityMemory])
			}
			if d.Env["PARENT_UUID"] != gpu.DeviceUUID(inv.Node, int(api.Name[4]-'0')) {
				t.Errorf("share %s: parent %q", api.Name, d.Env["PARENT_UUID"])
			}
		case gpu.TypeGPU:
			q := cc.Counters[gpu.CounterTimeSlices].Value
			if len(cc.CompatibilityGroups) != 0 || q.Value() != 4 {
				t.Errorf("whole GPU %s: groups %v, %s time slices; want none and all 4", api.Name, cc.CompatibilityGroups, q.String())
			}
		}
	}
	if count[gpu.TypeTimeSlice] != 8 || count[gpu.TypeGPU] != 2 || count[gpu.TypeMIG] != 2*18 {
		t.Errorf("devices by type %v, want 8 shares, 2 GPUs and 18 MIG devices a GPU", count)
	}
	// First-fit by counters alone lets MIG devices and shares run
	// together: what the compatibility groups forbid.
	mig := func(d resourceapi.Device) bool { return profileIs("1g.10gb")(d) || typeOf(d) == gpu.TypeTimeSlice }
	if got := firstFit(sets[:1], devs, mig); got != 7+4 {
		t.Errorf("by counters, %d 1g.10gb devices and shares fit one GPU; want 7 + 4, which only the groups keep apart", got)
	}
}

// Time slices without MIG need no compatibility group: the whole GPU takes
// every slice, which counters say alone, and such a pool is allocatable
// without the DRADeviceCompatibilityGroups gate.
func TestTimeSlicesAlone(t *testing.T) {
	inv := &Inventory{Node: "gpu-l4", Profile: mustProfile(t, "l4-24gb"), Count: 1, TimeSlices: 3}
	devs, pool := published(t, inv)
	slicetest.Validate(t, gpu.DriverName, inv.Node, pool)
	var names []string
	for _, d := range devs {
		names = append(names, d.API.Name)
		for _, cc := range d.API.ConsumesCounters {
			if len(cc.CompatibilityGroups) > 0 {
				t.Errorf("%s declares groups %v", d.API.Name, cc.CompatibilityGroups)
			}
		}
	}
	if got := strings.Join(names, " "); got != "gpu-0-ts-0 gpu-0-ts-1 gpu-0-ts-2 gpu-0" {
		t.Errorf("devices %s", got)
	}
	sets, err := inv.CounterSets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := firstFit(sets, devs, func(d resourceapi.Device) bool { return true }); got != 3 {
		t.Errorf("%d devices fit, want the 3 shares (the whole GPU needs them all)", got)
	}
}

func TestTimeSlicesRefused(t *testing.T) {
	for _, tc := range []struct {
		inv  Inventory
		want string
	}{
		{Inventory{Count: 1, TimeSlices: MaxTimeSlices + 1}, "time-slices 17: want between 0 and 16"},
		{Inventory{Count: 1, TimeSlices: -1}, "time-slices -1"},
		{Inventory{Count: 1, TimeSlices: 2, Sharing: SharingMemory}, "time-slices 2: a GPU shared by memory"},
		{Inventory{Count: 1, TimeSlices: 2, Attach: AttachFabric}, "not with partitioning, sharing or time slices"},
	} {
		tc.inv.Profile = mustProfile(t, "l4-24gb")
		err := tc.inv.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.inv, err, tc.want)
		}
	}
}

func groupsAre(got []string, want ...string) bool {
	return strings.Join(got, ",") == strings.Join(want, ",")
}
