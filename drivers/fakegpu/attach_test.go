package fakegpu

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/internal/slicetest"
)

// Fabric-attached GPUs carry the binding conditions, and the API takes a
// slice of the most devices it allows: binding conditions are no advanced
// feature that lowers the limit (taints, counters and list attributes are).
func TestFabricAttachedSlices(t *testing.T) {
	inv := &Inventory{Node: "gpu-fabric", Profile: mustProfile(t, "h100-80gb"), Count: resourceapi.ResourceSliceMaxDevices, Attach: AttachFabric}
	devs, pool := published(t, inv)
	slicetest.Validate(t, gpu.DriverName, inv.Node, pool)
	if len(pool) != 1 || len(devs) != resourceapi.ResourceSliceMaxDevices {
		t.Errorf("%d slices of %d devices, want one of %d", len(pool), len(devs), resourceapi.ResourceSliceMaxDevices)
	}
	for _, d := range devs {
		if !slices.Equal(d.API.BindingConditions, []string{ConditionAttached}) || !slices.Equal(d.API.BindingFailureConditions, []string{ConditionAttachFailed}) {
			t.Errorf("%s: binding conditions %v, failure conditions %v", d.API.Name, d.API.BindingConditions, d.API.BindingFailureConditions)
		}
		if a := d.API.Attributes[AttrAttach].StringValue; a == nil || *a != AttachFabric {
			t.Errorf("%s: attribute %s = %v, want %s", d.API.Name, AttrAttach, a, AttachFabric)
		}
		if d.API.BindsToNode != nil {
			t.Errorf("%s binds to node %v: a node-local GPU's slice names its node already", d.API.Name, *d.API.BindsToNode)
		}
	}
	plain, _ := published(t, &Inventory{Node: "n", Profile: mustProfile(t, "h100-80gb"), Count: 1})
	if _, ok := plain[0].API.Attributes[AttrAttach]; ok || plain[0].API.BindingConditions != nil || plain[0].API.BindingFailureConditions != nil {
		t.Errorf("a GPU in the node has binding conditions: %+v", plain[0].API)
	}
}

func TestAttachModeIsChecked(t *testing.T) {
	for _, c := range []struct {
		inv  Inventory
		want string
	}{
		{Inventory{Profile: mustProfile(t, "h100-80gb"), Count: 1, Attach: "cxl"}, `attach "cxl": want fabric`},
		{Inventory{Profile: mustProfile(t, "h100-80gb"), Count: 1, Attach: AttachFabric, Partitioning: PartitioningMIG}, `attach "fabric": a fabric-attached GPU is attached whole`},
		{Inventory{Profile: mustProfile(t, "l4-24gb"), Count: 1, Attach: AttachFabric, Sharing: SharingMemory}, `attach "fabric": a fabric-attached GPU is attached whole`},
	} {
		if _, err := c.inv.Devices(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.inv, err, c.want)
		}
	}
}
