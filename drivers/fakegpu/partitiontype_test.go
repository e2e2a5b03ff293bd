package fakegpu

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/internal/slicetest"
)

// cost is what a device consumes, as one string: its counter sets and
// counters with their amounts.
func cost(d resourceapi.Device) string {
	var parts []string
	for _, cc := range d.ConsumesCounters {
		for name, q := range cc.Counters {
			parts = append(parts, fmt.Sprintf("%s/%s=%s", cc.CounterSet, name, q.Value.String()))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// With partition types every device of a partitioned, time-sliced GPU
// names its type, and devices of one type consume exactly the same
// counters of the same set, which the pool status controller requires of
// a type (else PartitionCostMismatch): a MIG placement is a type of its
// own, a GPU's shares are one. A slice naming the attribute as its
// partitionTypeAttribute, as the kit names it, passes the API server's
// validation; GPUs neither partitioned nor time-sliced refuse the option.
func TestPartitionTypes(t *testing.T) {
	p := mustProfile(t, "a100-80gb")
	inv := &Inventory{Node: "n", Profile: p, Count: 2, Partitioning: PartitioningMIG, TimeSlices: 2, PartitionTypes: true}
	devs, pool := published(t, inv)
	costs := map[string]map[string]bool{}
	for _, d := range devs {
		typ := ptr.Deref(d.API.Attributes[gpu.AttrPartitionType].StringValue, "")
		if typ == "" {
			t.Fatalf("%s has no partition type", d.API.Name)
		}
		if costs[typ] == nil {
			costs[typ] = map[string]bool{}
		}
		costs[typ][cost(d.API)] = true
	}
	for typ, c := range costs {
		if len(c) != 1 {
			t.Errorf("partition type %s: devices consume %d different sets of counters", typ, len(c))
		}
	}
	for _, want := range []string{"gpu-0/whole", "gpu-1/whole", "gpu-0/time-slice", "gpu-1/1g.10gb@3", "gpu-0/7g.80gb@0"} {
		if costs[want] == nil {
			t.Errorf("no partition type %s among %d", want, len(costs))
		}
	}
	// Per GPU: the whole GPU, its shares and each MIG placement.
	if want := 2 * (1 + 1 + 18); len(costs) != want {
		t.Errorf("%d partition types, want %d", len(costs), want)
	}
	attr := resourceapi.FullyQualifiedName(gpu.DriverName + "/" + gpu.AttrPartitionType)
	for i := range pool {
		if slices.ContainsFunc(pool[i].Devices, func(d resourceapi.Device) bool { return len(d.ConsumesCounters) > 0 }) {
			pool[i].PartitionTypeAttribute = &attr
		}
	}
	slicetest.Validate(t, gpu.DriverName, "n", pool)
	if err := (&Inventory{Node: "n", Profile: p, Count: 1, PartitionTypes: true}).Validate(); err == nil || !strings.Contains(err.Error(), "partition-types") {
		t.Errorf("partition types of whole GPUs: %v, want an error naming partition-types", err)
	}
}
