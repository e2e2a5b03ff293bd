package fakecpu

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/dralab/dralab/drivers/internal/slicetest"
)

// Four complexes of 16: each maps to 16 of the node's cpu, the cpusets
// tile the node's CPUs, half of the complexes on each socket and NUMA
// node, and the pool passes the API server's validation.
func TestComplexes(t *testing.T) {
	inv := &Inventory{Node: "n", Complexes: 4, CPUsPerComplex: 16}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPUs() != 64 || len(devs) != 4 {
		t.Fatalf("CPUs %d, %d devices; want 64 and 4", inv.CPUs(), len(devs))
	}
	wantSets := []string{"0-15", "16-31", "32-47", "48-63"}
	var api []resourceapi.Device
	for i, d := range devs {
		a := d.API
		api = append(api, a)
		if got := *a.Attributes[AttrCPUSet].StringValue; got != wantSets[i] || d.Env["CPUSET"] != got {
			t.Errorf("%s: cpuset %q, env %q, want %q", a.Name, got, d.Env["CPUSET"], wantSets[i])
		}
		numa, socket := *a.Attributes[deviceattribute.StandardDeviceAttributeNUMANode].IntValue, *a.Attributes[AttrSocket].IntValue
		if want := int64(i / 2); numa != want || socket != want {
			t.Errorf("%s: NUMA node %d, socket %d, want %d", a.Name, numa, socket, want)
		}
		m := a.NodeAllocatableResources[v1.ResourceCPU].Mapping
		if len(a.NodeAllocatableResources) != 1 || m == nil || m.DeviceMultiplier == nil || m.DeviceMultiplier.Cmp(resource.MustParse("16")) != 0 || m.CapacityKey != nil {
			t.Errorf("%s: nodeAllocatableResources %+v, want cpu mapped 16 per device", a.Name, a.NodeAllocatableResources)
		}
	}
	slicetest.Validate(t, DriverName, "n", []resourceslice.Slice{{Devices: api}})
}

func TestInvalidInventories(t *testing.T) {
	for _, c := range []struct {
		inv  Inventory
		want string
	}{
		{Inventory{Complexes: 0, CPUsPerComplex: 8}, "complexes 0"},
		{Inventory{Complexes: 65, CPUsPerComplex: 8}, "complexes 65"},
		{Inventory{Complexes: 2, CPUsPerComplex: 0}, "cpus-per-complex 0"},
	} {
		if _, err := c.inv.Devices(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.inv, err, c.want)
		}
	}
}
