package devices

import "slices"

// Groups are the compatibility groups (Kubernetes 1.37's
// DRADeviceCompatibilityGroups, alpha) of what is allocated on each counter
// set: devices that consume one counter set are allocated together only if
// they share a group, and a device that declares none goes only with others
// that declare none.
type Groups map[SetKey]*GroupSet

// GroupSet is what the devices on one counter set have in common.
type GroupSet struct {
	// NoGroups: the devices declare no group, so only such a device joins
	// them. Otherwise Common are the groups they all declare.
	NoGroups bool
	Common   []string
}

// admits says whether a device declaring groups may join the set.
func (g *GroupSet) admits(groups []string) bool {
	switch {
	case g == nil:
		return true
	case len(groups) == 0 || g.NoGroups:
		return len(groups) == 0 && g.NoGroups
	}
	return slices.ContainsFunc(groups, func(n string) bool { return slices.Contains(g.Common, n) })
}

// GroupsHeld are the compatibility groups of the devices allocated now, on
// each counter set of the Current slices.
func (s *State) GroupsHeld() Groups {
	out := Groups{}
	s.eachAllocatedDevice(out.Take)
	return out
}

// Admits says whether d may be allocated beside the devices on every
// counter set it consumes.
func (g Groups) Admits(d Device) bool {
	for _, cons := range d.ConsumesCounters {
		if !g[SetKey{d.Driver, d.Pool, cons.CounterSet}].admits(cons.CompatibilityGroups) {
			return false
		}
	}
	return true
}

// Take adds d to the counter sets it consumes.
func (g Groups) Take(d Device) {
	for _, cons := range d.ConsumesCounters {
		k := SetKey{d.Driver, d.Pool, cons.CounterSet}
		cur := g[k]
		switch {
		case cur == nil:
			g[k] = &GroupSet{NoGroups: len(cons.CompatibilityGroups) == 0, Common: slices.Clone(cons.CompatibilityGroups)}
		case !cur.NoGroups && len(cons.CompatibilityGroups) > 0:
			cur.Common = slices.DeleteFunc(cur.Common, func(n string) bool { return !slices.Contains(cons.CompatibilityGroups, n) })
		}
	}
}
