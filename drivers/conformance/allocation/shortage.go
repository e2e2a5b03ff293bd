package allocation

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// Reason codes of partitioned and shared devices: a free device that the
// allocator still cannot give.
const (
	// CounterExhausted: a matching partition (or whole GPU) is free, but
	// the devices allocated beside it hold a counter it needs.
	CounterExhausted = "CounterExhausted"
	// CapacityExhausted: a matching shared device has too little of a
	// capacity left for one more share.
	CapacityExhausted = "CapacityExhausted"
	// IncompatibleGroups: a matching device is free and its counters have
	// room, but a device allocated on the same counter set shares no
	// compatibility group with it (a GPU running MIG devices, asked for a
	// time-sliced share).
	IncompatibleGroups = "IncompatibleGroups"
)

// counterShortage says which counter keeps a free device from being
// allocated, from the published counter sets and what the allocated
// devices of the same pool consume: "" when every counter has room. Each
// device consumes once, as the allocator charges it, however many claims
// share it (a device that allows multiple allocations); the message names
// every claim holding it.
func (s *Snapshot) counterShortage(c deviceRef, namespace string) string {
	for _, need := range c.dev.ConsumesCounters {
		total := s.counterSet(c.driver, c.pool, need.CounterSet)
		if total == nil {
			continue
		}
		used := map[string]*resource.Quantity{}
		holders := map[string][]string{}
		charged := map[string]bool{}
		s.eachOnCounterSet(c, need.CounterSet, func(claim string, dev *resourceapi.Device, cons resourceapi.DeviceCounterConsumption) {
			// The pool is c's: the device's name tells it apart.
			first := !charged[dev.Name]
			charged[dev.Name] = true
			for name, q := range cons.Counters {
				if used[name] == nil {
					used[name] = &resource.Quantity{}
				}
				if first {
					used[name].Add(q.Value)
				}
				holders[name] = append(holders[name], strings.TrimPrefix(claim, namespace+"/"))
			}
		})
		names := make([]string, 0, len(need.Counters))
		for name := range need.Counters {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			have, ok := total[name]
			if !ok || used[name] == nil {
				continue
			}
			want := need.Counters[name].Value
			sum := used[name].DeepCopy()
			sum.Add(want)
			if sum.Cmp(have.Value) > 0 {
				return fmt.Sprintf("%s needs %s of counter %s of %s, which has %s: %s held by %s",
					c, want.String(), name, need.CounterSet, have.Value.String(), used[name].String(),
					strings.Join(dedupe(holders[name]), ", "))
			}
		}
	}
	return ""
}

// groupShortage says which allocated devices keep a free device out by
// their compatibility groups: on a counter set the device consumes, they
// have no group in common with it (each of them, or all of them together).
// "" when the groups admit it.
func (s *Snapshot) groupShortage(c deviceRef, namespace string) string {
	if g := s.groupConflict(c, namespace); g != nil {
		return fmt.Sprintf("%s %s", c, g)
	}
	return ""
}

// groupConflict is what keeps free devices out by compatibility groups:
// what is allocated on a counter set of their pool.
type groupConflict struct {
	pool, set string
	// groups are the devices' own; holders the allocated devices that
	// share none with them, with their groups and claims.
	groups, holders string
}

func (g *groupConflict) String() string {
	return fmt.Sprintf("(%s) shares no compatibility group with what is allocated on counter set %s: %s", g.groups, g.set, g.holders)
}

// groupConflict is groupShortage's finding, nil when the groups admit c.
func (s *Snapshot) groupConflict(c deviceRef, namespace string) *groupConflict {
	cand := devices.Device{Driver: c.driver, Pool: c.pool, Device: *c.dev}
	for _, need := range c.dev.ConsumesCounters {
		var apart, all []string
		together := devices.Groups{}
		s.eachOnCounterSet(c, need.CounterSet, func(claim string, dev *resourceapi.Device, cons resourceapi.DeviceCounterConsumption) {
			held := devices.Device{Driver: c.driver, Pool: c.pool, Device: *dev}
			one := devices.Groups{}
			one.Take(held)
			together.Take(held)
			words := fmt.Sprintf("%s (%s) of %s", dev.Name, groupWords(cons.CompatibilityGroups), strings.TrimPrefix(claim, namespace+"/"))
			all = append(all, words)
			if !one.Admits(cand) {
				apart = append(apart, words)
			}
		})
		if together.Admits(cand) {
			continue
		}
		if len(apart) == 0 {
			apart = all // no one device, but all of them together
		}
		sort.Strings(apart)
		return &groupConflict{pool: c.pool, set: need.CounterSet, groups: groupWords(need.CompatibilityGroups), holders: strings.Join(dedupe(apart), ", ")}
	}
	return nil
}

// groupConflicts says in one sentence per conflict which free devices
// their compatibility groups keep out: "pool/d1, d2 (group g) share no
// compatibility group with …".
func (s *Snapshot) groupConflicts(cands []deviceRef, namespace string) []string {
	byConflict := map[groupConflict][]string{}
	// counted: those of them a pool status counts allocatable.
	counted := map[groupConflict]int{}
	var order []groupConflict
	var types map[string]PartitionType
	for _, c := range cands {
		g := s.groupConflict(c, namespace)
		if g == nil {
			continue
		}
		if _, ok := byConflict[*g]; !ok {
			order = append(order, *g)
		}
		byConflict[*g] = append(byConflict[*g], c.dev.Name)
		if typ, ok := s.partitionTypeOf(c); ok {
			if types == nil {
				types = map[string]PartitionType{}
				for _, pt := range s.PartitionTypes() {
					types[pt.Driver+"/"+pt.Pool+" "+pt.Type] = pt
				}
			}
			if types[c.driver+"/"+c.pool+" "+typ].Allocatable > 0 {
				counted[*g]++
			}
		}
	}
	var out []string
	for _, g := range order {
		names := byConflict[g]
		verb := "shares"
		if len(names) > 1 {
			verb = "share"
		}
		line := fmt.Sprintf("%s/%s (%s) %s no compatibility group with what is allocated on counter set %s: %s", g.pool, strings.Join(names, ", "), g.groups, verb, g.set, g.holders)
		if n := counted[g]; n > 0 {
			line += fmt.Sprintf(" (a ResourcePoolStatusRequest counts %d of them allocatable: it weighs counters, not compatibility groups)", n)
		}
		out = append(out, line)
	}
	return out
}

// groupWords names a device's compatibility groups.
func groupWords(groups []string) string {
	if len(groups) == 0 {
		return "no group"
	}
	if len(groups) == 1 {
		return "group " + groups[0]
	}
	return "groups " + strings.Join(groups, ", ")
}

// capacityShortage checks one more share of a device that several claims
// may share: never is set when the request exceeds what the device has at
// all, short when the shares already allocated leave too little.
func (s *Snapshot) capacityShortage(c deviceRef, alt alternative, namespace string) (never, short string) {
	consumed := map[resourceapi.QualifiedName]*resource.Quantity{}
	var holders []string
	s.eachAllocated(func(claim string, r resourceapi.DeviceRequestAllocationResult, _ *resourceapi.Device) {
		if r.Driver != c.driver || r.Pool != c.pool || r.Device != c.dev.Name {
			return
		}
		holders = append(holders, strings.TrimPrefix(claim, namespace+"/"))
		for name, q := range r.ConsumedCapacity {
			if consumed[name] == nil {
				consumed[name] = &resource.Quantity{}
			}
			consumed[name].Add(q)
		}
	})
	names := make([]string, 0, len(c.dev.Capacity))
	for name := range c.dev.Capacity {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		name := resourceapi.QualifiedName(n)
		capacity := c.dev.Capacity[name]
		need := shareOf(capacity, alt.capacity, name)
		limit := capacity.Value
		if p := capacity.RequestPolicy; p != nil && p.ValidRange != nil && p.ValidRange.Max != nil && p.ValidRange.Max.Cmp(limit) < 0 {
			limit = *p.ValidRange.Max
		}
		if need.Cmp(limit) > 0 {
			return fmt.Sprintf("%s: %s of %s asked, one share may take at most %s (the device has %s)",
				c, need.String(), name, limit.String(), capacity.Value.String()), ""
		}
		if consumed[name] == nil {
			continue
		}
		sum := consumed[name].DeepCopy()
		sum.Add(need)
		if sum.Cmp(capacity.Value) > 0 {
			short = fmt.Sprintf("%s has %s of %s, %s consumed by %s; %s more does not fit",
				c, capacity.Value.String(), name, consumed[name].String(), strings.Join(dedupe(holders), ", "), need.String())
			break
		}
	}
	return "", short
}

// shareOf is what one share takes of a capacity: what the request asks,
// else the policy's default, else all of it.
func shareOf(capacity resourceapi.DeviceCapacity, requests map[resourceapi.QualifiedName]resource.Quantity, name resourceapi.QualifiedName) resource.Quantity {
	if q, ok := requests[name]; ok {
		return q
	}
	if capacity.RequestPolicy != nil && capacity.RequestPolicy.Default != nil {
		return *capacity.RequestPolicy.Default
	}
	return capacity.Value
}

// counterSet finds a pool's published counter set.
func (s *Snapshot) counterSet(driver, pool, name string) map[string]resourceapi.Counter {
	return s.index().counters[deviceKey{driver, pool, name}]
}

// state is the snapshot as the one reader of free devices
// (drivers/conformance/devices) sees it.
func (s *Snapshot) state() *devices.State {
	return &devices.State{Slices: s.Slices, Claims: s.AllClaims, TaintRules: s.TaintRules}
}

// eachAllocated calls f for every device allocated without admin access,
// with the holding claim (namespace/name) and the published device (nil
// when no slice publishes it any more).
func (s *Snapshot) eachAllocated(f func(claim string, r resourceapi.DeviceRequestAllocationResult, dev *resourceapi.Device)) {
	s.state().Allocated(func(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) {
		f(c.Namespace+"/"+c.Name, r, s.device(r.Driver, r.Pool, r.Device))
	})
}

// eachOnCounterSet calls f for each allocated device of c's pool that
// consumes counter set set, with its claim and what it consumes there.
func (s *Snapshot) eachOnCounterSet(c deviceRef, set string, f func(claim string, dev *resourceapi.Device, cons resourceapi.DeviceCounterConsumption)) {
	for _, a := range s.index().allocated[poolKey{c.driver, c.pool}] {
		if a.dev == nil {
			continue
		}
		for _, cons := range a.dev.ConsumesCounters {
			if cons.CounterSet == set {
				f(a.claim, a.dev, cons)
			}
		}
	}
}

// FreePartitions counts, per partition profile (a MIG profile, as the
// Vocabulary's ProfileAttribute names it; none without one), how many more
// devices of that profile the published counters allow beside the devices allocated now
// (and their compatibility groups),
// taking free devices first-fit in publication order as the allocator
// does. Devices that consume no counters are not partitions; tainted
// devices are not free.
func (s *Snapshot) FreePartitions() map[string]int {
	profileOf := func(d devices.Device) string {
		if s.Vocabulary.ProfileAttribute == "" {
			return ""
		}
		return stringAttr(&d.Device, s.Vocabulary.ProfileAttribute)
	}
	st := s.state()
	held := st.Held()
	parts := slices.DeleteFunc(st.Published("", ""), func(d devices.Device) bool {
		return len(d.ConsumesCounters) == 0 || profileOf(d) == "" || len(st.Taints(d)) > 0
	})
	out := map[string]int{}
	profiles := map[string]bool{}
	for _, d := range parts {
		profiles[profileOf(d)] = true
	}
	for profile := range profiles {
		left, groups := st.CountersLeft(), st.GroupsHeld()
		for _, d := range parts {
			if _, ok := held[d.Key()]; ok || profileOf(d) != profile || !left.Fits(d) || !groups.Admits(d) {
				continue
			}
			left.Take(d)
			groups.Take(d)
			out[profile]++
		}
	}
	return out
}

// FreeShare is what a device that several claims share has left of a
// capacity, and the most one share may take of it.
type FreeShare struct {
	Driver, Pool, Device string
	Left, MaxShare       resource.Quantity
}

// FreeShares lists, for every published device that several claims may
// share and that has the capacity, what the allocated shares leave of it.
func (s *Snapshot) FreeShares(capacity resourceapi.QualifiedName) []FreeShare {
	var out []FreeShare
	for i := range s.Slices {
		sl := &s.Slices[i]
		for j := range sl.Spec.Devices {
			dev := &sl.Spec.Devices[j]
			c, ok := dev.Capacity[capacity]
			if !ok || dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
				continue
			}
			f := FreeShare{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: dev.Name, Left: c.Value.DeepCopy(), MaxShare: c.Value.DeepCopy()}
			if p := c.RequestPolicy; p != nil && p.ValidRange != nil && p.ValidRange.Max != nil && p.ValidRange.Max.Cmp(f.MaxShare) < 0 {
				f.MaxShare = p.ValidRange.Max.DeepCopy()
			}
			s.eachAllocated(func(_ string, r resourceapi.DeviceRequestAllocationResult, _ *resourceapi.Device) {
				if q, ok := r.ConsumedCapacity[capacity]; ok && r.Driver == f.Driver && r.Pool == f.Pool && r.Device == f.Device {
					f.Left.Sub(q)
				}
			})
			out = append(out, f)
		}
	}
	return out
}
