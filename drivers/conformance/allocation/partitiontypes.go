package allocation

import (
	"cmp"
	"slices"

	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// PartitionType is one partition type of a pool (Kubernetes 1.37's
// DRAPartitionableDevicesType: a slice names the attribute whose value is
// each device's type, partitionTypeAttribute), as the lab counts it from
// the slices and the claims.
type PartitionType struct {
	Driver, Pool string
	// Attribute is the slices' partitionTypeAttribute, Type the value.
	Attribute, Type string
	// Total counts the pool's devices of the type. Allocatable counts how
	// many more of them the counters left would take, first fit in
	// publication order, as a ResourcePoolStatusRequest defines it:
	// counters only. Admitted counts those of them that the compatibility
	// groups of what is allocated would let in too, which the pool status
	// does not weigh.
	Total, Allocatable, Admitted int
}

// partitionTypeOf is a device's partition type, where its slice names a
// partitionTypeAttribute.
func (s *Snapshot) partitionTypeOf(c deviceRef) (string, bool) {
	for i := range s.Slices {
		sl := &s.Slices[i]
		attr := string(ptr.Deref(sl.Spec.PartitionTypeAttribute, ""))
		if attr == "" || sl.Spec.Driver != c.driver || sl.Spec.Pool.Name != c.pool {
			continue
		}
		for j := range sl.Spec.Devices {
			if sl.Spec.Devices[j].Name == c.dev.Name {
				return devices.Attribute(c.driver, sl.Spec.Devices[j].Attributes, attr)
			}
		}
	}
	return "", false
}

// PartitionTypes counts the partition types of every pool whose slices
// name a partitionTypeAttribute, sorted by pool and type. Devices that
// consume no counters are not partitions.
func (s *Snapshot) PartitionTypes() []PartitionType {
	st := s.state()
	held := st.Held()
	type key struct{ driver, pool, attr, typ string }
	byKey := map[key]*PartitionType{}
	fresh := map[key][]devices.Device{}
	for _, sl := range st.Current("", "") {
		attr := string(ptr.Deref(sl.Spec.PartitionTypeAttribute, ""))
		if attr == "" {
			continue
		}
		for _, d := range sl.Spec.Devices {
			typ, ok := devices.Attribute(sl.Spec.Driver, d.Attributes, attr)
			if !ok || len(d.ConsumesCounters) == 0 {
				continue
			}
			k := key{sl.Spec.Driver, sl.Spec.Pool.Name, attr, typ}
			if byKey[k] == nil {
				byKey[k] = &PartitionType{Driver: k.driver, Pool: k.pool, Attribute: attr, Type: typ}
			}
			byKey[k].Total++
			dev := devices.Device{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: d}
			if _, ok := held[dev.Key()]; !ok {
				fresh[k] = append(fresh[k], dev)
			}
		}
	}
	out := make([]PartitionType, 0, len(byKey))
	for k, pt := range byKey {
		left, admitted, groups := st.CountersLeft(), st.CountersLeft(), st.GroupsHeld()
		for _, d := range fresh[k] {
			if left.Fits(d) {
				left.Take(d)
				pt.Allocatable++
			}
			if admitted.Fits(d) && groups.Admits(d) {
				admitted.Take(d)
				groups.Take(d)
				pt.Admitted++
			}
		}
		out = append(out, *pt)
	}
	slices.SortFunc(out, func(a, b PartitionType) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Attribute, b.Attribute), cmp.Compare(a.Type, b.Type))
	})
	return out
}
