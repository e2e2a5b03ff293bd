package kit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// CounterInventory is an Inventory of partitionable devices: devices that
// consume counters shared with other devices (a GPU's memory slices, which
// its whole device and each of its MIG placements take), so that the
// allocator hands out only devices that fit together.
type CounterInventory interface {
	Inventory
	// CounterSets returns the counter sets the devices consume from.
	CounterSets(ctx context.Context) ([]resourceapi.CounterSet, error)
}

// maxDevicesPerSlice is the API's limit on a slice's devices: fewer when
// any device consumes counters or has taints.
func maxDevicesPerSlice(devs []resourceapi.Device) int {
	for _, d := range devs {
		if len(d.ConsumesCounters) > 0 || len(d.Taints) > 0 {
			return resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
	}
	return resourceapi.ResourceSliceMaxDevices
}

// Slices returns the ResourceSlices of a pool of devices (in their order)
// and counter sets, as a driver publishes them: checked against the API's
// limits on counters, and cut into slices the API accepts.
func Slices(devs []resourceapi.Device, sets []resourceapi.CounterSet) ([]resourceslice.Slice, error) {
	return SlicesOf(devs, sets, 0)
}

// SlicesOf is Slices with at most perSlice devices a slice (0: as many as
// the API allows): a pool of many slices, as a driver with more devices
// than one slice holds publishes.
func SlicesOf(devs []resourceapi.Device, sets []resourceapi.CounterSet, perSlice int) ([]resourceslice.Slice, error) {
	if err := checkCounters(devs, sets); err != nil {
		return nil, err
	}
	if perSlice < 0 {
		return nil, fmt.Errorf("%d devices a slice: want 1 or more (0: the API's limit)", perSlice)
	}
	return poolSlices(devs, sets, perSlice), nil
}

// poolSlices cuts a pool into ResourceSlices the API accepts. Since 1.35 a
// slice holds counter sets or devices, never both: the counter sets come
// first, at most ResourceSliceMaxCounterSets a slice, then the devices in
// the inventory's order, at most maxDevicesPerSlice a slice. Devices that
// consume the same counter set (one GPU's) stay in one slice where they
// fit, since the allocator orders slices by their generated names and
// devices only within a slice: a GPU's smallest placement stays its first.
func poolSlices(devs []resourceapi.Device, sets []resourceapi.CounterSet, perSlice int) []resourceslice.Slice {
	var out []resourceslice.Slice
	for chunk := range slices.Chunk(sets, resourceapi.ResourceSliceMaxCounterSets) {
		out = append(out, resourceslice.Slice{SharedCounters: chunk})
	}
	limit := maxDevicesPerSlice(devs)
	if perSlice > 0 {
		limit = min(limit, perSlice)
	}
	var cur []resourceapi.Device
	flush := func() {
		if len(cur) > 0 {
			out = append(out, resourceslice.Slice{Devices: cur})
			cur = nil
		}
	}
	for _, group := range counterGroups(devs) {
		if len(cur)+len(group) > limit {
			flush()
		}
		for len(group) > limit {
			out = append(out, resourceslice.Slice{Devices: group[:limit]})
			group = group[limit:]
		}
		cur = append(cur, group...)
	}
	flush()
	if len(out) == 0 {
		// A pool without devices is still published, empty, so that
		// consumers see the node has none.
		out = append(out, resourceslice.Slice{})
	}
	return out
}

// counterGroups splits devices into runs that consume from the same first
// counter set; a device without counters is a run of its own.
func counterGroups(devs []resourceapi.Device) [][]resourceapi.Device {
	var groups [][]resourceapi.Device
	set := func(d resourceapi.Device) string {
		if len(d.ConsumesCounters) == 0 {
			return ""
		}
		return d.ConsumesCounters[0].CounterSet
	}
	for i, d := range devs {
		if i > 0 && set(d) != "" && set(d) == set(devs[i-1]) {
			groups[len(groups)-1] = append(groups[len(groups)-1], d)
			continue
		}
		groups = append(groups, []resourceapi.Device{d})
	}
	return groups
}

// checkCounters refuses an inventory the API or the allocator would refuse:
// a slice with an invalid counter consumption makes the whole pool
// unusable, so the driver stops at once and names the device instead.
func checkCounters(devs []resourceapi.Device, sets []resourceapi.CounterSet) error {
	byName := map[string]resourceapi.CounterSet{}
	for _, s := range sets {
		if _, dup := byName[s.Name]; dup {
			return fmt.Errorf("counter set %q is listed twice", s.Name)
		}
		if len(s.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
			return fmt.Errorf("counter set %q has %d counters, more than the API's %d", s.Name, len(s.Counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
		}
		byName[s.Name] = s
	}
	for _, d := range devs {
		if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
			return fmt.Errorf("device %s consumes from %d counter sets, more than the API's %d", d.Name, len(d.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
		}
		for _, c := range d.ConsumesCounters {
			s, ok := byName[c.CounterSet]
			if !ok {
				return fmt.Errorf("device %s consumes from counter set %q, which the inventory does not have", d.Name, c.CounterSet)
			}
			for _, name := range slices.Sorted(maps.Keys(c.Counters)) {
				have, ok := s.Counters[name]
				if !ok {
					return fmt.Errorf("device %s consumes counter %s of counter set %s, which has no such counter", d.Name, name, s.Name)
				}
				if want := c.Counters[name].Value; want.Cmp(have.Value) > 0 {
					return fmt.Errorf("device %s consumes %s of counter %s in counter set %s, which has %s", d.Name, want.String(), name, s.Name, have.Value.String())
				}
			}
		}
	}
	return nil
}

// counterConflict is the driver's own check that an allocation is
// possible, as holder is for whole devices: the prepared devices of other
// claims and the claim's own devices, each taking its counters, must fit
// the counter sets. A stale or forged allocation that would put two
// overlapping MIG placements on one GPU is refused, naming who holds the
// counter. Shared and admin-access devices take no counters.
func (d *Driver) counterConflict(uid types.UID, own []PreparedDevice) error {
	type use struct {
		q       resource.Quantity
		holders []string
	}
	used := map[string]map[string]*use{}
	take := func(holder string, device string) {
		dev, ok := d.devices[device]
		if !ok {
			return
		}
		for _, c := range dev.API.ConsumesCounters {
			if used[c.CounterSet] == nil {
				used[c.CounterSet] = map[string]*use{}
			}
			for name, q := range c.Counters {
				u := used[c.CounterSet][name]
				if u == nil {
					u = &use{}
					used[c.CounterSet][name] = u
				}
				u.q.Add(q.Value)
				u.holders = append(u.holders, holder)
			}
		}
	}
	for _, other := range slices.Sorted(maps.Keys(d.cp.Claims)) {
		if other == uid {
			continue
		}
		c := d.cp.Claims[other]
		for _, pd := range c.Devices {
			if !pd.Shared && pd.Pool == d.opts.NodeName {
				take(fmt.Sprintf("%s (claim %s/%s)", pd.Device, c.Namespace, c.Name), pd.Device)
			}
		}
	}
	for _, pd := range own {
		if !pd.Shared {
			take(pd.Device+" (this claim)", pd.Device)
		}
	}
	for _, set := range slices.Sorted(maps.Keys(used)) {
		for _, name := range slices.Sorted(maps.Keys(used[set])) {
			u := used[set][name]
			have := d.counterSets[set].Counters[name].Value
			if u.q.Cmp(have) > 0 {
				return fmt.Errorf("counter %s of counter set %s (%s) would be overcommitted: %s take %s; refusing to hand it out twice",
					name, set, have.String(), strings.Join(u.holders, ", "), u.q.String())
			}
		}
	}
	return nil
}
