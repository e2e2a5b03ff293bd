package allocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// Reason codes of a waiting pod, beyond the scheduler's generic "cannot
// allocate all claims".
const (
	// NoMatchingDevice: no device in the cluster matches a request's class
	// and selectors, in any of its alternatives.
	NoMatchingDevice = "NoMatchingDevice"
	// AllAllocated: devices match, but every one is allocated to other claims.
	AllAllocated = "AllAllocated"
	// Tainted: the free matching devices are tainted.
	Tainted = "Tainted"
	// Insufficient: the scheduler found too little of a counted resource.
	Insufficient = "Insufficient"
	// SelectorError: a selector fails on a device (a CEL runtime error,
	// such as an attribute read without has()); the allocator gives up the
	// claim there instead of trying other devices.
	SelectorError = "SelectorError"
	// NotOnOneNode: enough matching devices are free in the cluster, but
	// a claim's devices are on one node, and no node has enough.
	NotOnOneNode = "NotOnOneNode"
	// ConstraintUnmet: enough matching devices are free, but no set of
	// them meets the claim's matchAttribute constraint (devices of one
	// node sharing the attribute's value).
	ConstraintUnmet = "ConstraintUnmet"
)

type deviceRef struct {
	driver, pool string
	// node is the node of a node-local device (its slice's nodeName, or
	// its own under perDeviceNodeSelection); "" for a device several nodes
	// may reach (allNodes or a node selector).
	node  string
	dev   *resourceapi.Device
	slice *resourceapi.ResourceSlice
}

// newDeviceRef refers to a device of a slice.
func newDeviceRef(sl *resourceapi.ResourceSlice, dev *resourceapi.Device) deviceRef {
	node := ptr.Deref(sl.Spec.NodeName, "")
	if ptr.Deref(sl.Spec.PerDeviceNodeSelection, false) {
		node = ptr.Deref(dev.NodeName, "")
	}
	return deviceRef{driver: sl.Spec.Driver, pool: sl.Spec.Pool.Name, node: node, dev: dev, slice: sl}
}

// reaches tells whether the device is reachable from node, as the
// allocator matches a slice's (or, under perDeviceNodeSelection, the
// device's) nodeName, allNodes or nodeSelector.
func (d deviceRef) reaches(node *v1.Node) bool {
	if d.slice == nil {
		return d.node == "" || d.node == node.Name
	}
	return devices.NodeReaches(d.slice, d.dev, node)
}

func (d deviceRef) String() string { return d.pool + "/" + d.dev.Name }

// Reaches are the snapshot's nodes from which device dev of slice sl is
// reachable, as the allocator matches node selection, sorted.
func (s *Snapshot) Reaches(sl *resourceapi.ResourceSlice, dev *resourceapi.Device) []string {
	return s.reaching(newDeviceRef(sl, dev))
}

// alternative is one way to satisfy a request: its only one, or one
// subrequest of a prioritized list.
type alternative struct {
	name        string
	class       string
	selectors   []resourceapi.DeviceSelector
	count       int
	adminAccess bool
	tolerations []resourceapi.DeviceToleration
	// capacity is what one share asks of a device several claims share.
	capacity map[resourceapi.QualifiedName]resource.Quantity
	// match is the attribute a matchAttribute constraint of the claim
	// makes the request's devices share; "" for none.
	match resourceapi.FullyQualifiedName
	// derived are the request's derived attributes, which a constraint
	// may compare.
	derived []resourceapi.DeviceDerivedAttribute
	// all: allocationMode All, every matching device a node reaches.
	all bool
}

// why explains a pod the scheduler could not place: for each unallocated
// claim it finds the devices that match each request (with the
// allocator's own CEL library) and tells whether none exist, all are
// allocated (naming to which claims) or all are tainted.
func (s *Snapshot) why(ctx context.Context, pod *v1.Pod) (string, string, error) {
	code, msg, err := s.whyPod(ctx, pod)
	g, grouped := s.groupOf(pod)
	switch {
	// PodGroups unread (nil, as from informers without them): the pod
	// is explained on its own.
	case err != nil || !grouped || s.PodGroups == nil:
		return code, msg, err
	case code == NotDRA:
		// Its devices are there: what holds it may be its group.
		return s.whyGroup(ctx, pod, g, msg)
	case code != "":
		return code, g.String() + ": " + msg, nil
	}
	return s.whyGroup(ctx, pod, g, msg)
}

// whyPod explains a pod on its own, as if it were in no group: the
// allocator's verdict on every node decides whether DRA holds it; the
// device model says why.
func (s *Snapshot) whyPod(ctx context.Context, pod *v1.Pod) (string, string, error) {
	v, err := s.podVerdict(ctx, pod)
	if err != nil {
		return "", "", err
	}
	if v != nil {
		if code, msg, ok := v.outsideDRA(schedulingMessage(pod)); ok {
			if code == NotDRA || code == Insufficient {
				// The scheduler's other DRA check: what the devices add
				// to a node's CPU and memory.
				c, m, err := s.whyNodeResources(ctx, pod, schedulingMessage(pod), s.AllocatedDevices())
				if err != nil || c != "" {
					return c, m, err
				}
			}
			return code, msg, nil
		}
	}
	code, msg, err := s.whyModel(ctx, pod)
	if err != nil || v == nil {
		return code, msg, err
	}
	return s.agree(v, code, msg)
}

// whyModel is the device model's explanation of a pod.
func (s *Snapshot) whyModel(ctx context.Context, pod *v1.Pod) (string, string, error) {
	message := schedulingMessage(pod)
	holders := s.AllocatedDevices()
	if len(pod.Spec.ResourceClaims) == 0 {
		// Extended resources backed by a DeviceClass are claims too.
		for _, req := range s.extendedRequests(pod) {
			code, msg, err := s.whyAlternatives(ctx, pod.Namespace, "extended resource "+req.name, []alternative{req}, holders)
			if err != nil || code != "" {
				return code, msg, err
			}
		}
		if strings.Contains(message, "Insufficient") {
			return Insufficient, message, nil
		}
		return "", message, nil
	}
	for _, ref := range podClaims(pod) {
		claim := s.Claims[claimKey(pod.Namespace, ref.name)]
		if claim == nil || claim.Status.Allocation != nil {
			continue
		}
		for _, req := range claim.Spec.Devices.Requests {
			code, msg, err := s.whyRequest(ctx, claim, req, holders)
			if err != nil || code != "" {
				return code, msg, err
			}
		}
		if code, msg, err := s.whyTogether(ctx, claim, holders); err != nil || code != "" {
			return code, msg, err
		}
	}
	if code, msg, err := s.whyNodeResources(ctx, pod, message, holders); err != nil || code != "" || msg != "" {
		return code, msg, err
	}
	return "", message, nil
}

func alternatives(req resourceapi.DeviceRequest) []alternative {
	if req.Exactly != nil {
		alt := newAlternative(req.Name, req.Exactly.DeviceClassName, req.Exactly.Selectors, req.Exactly.AllocationMode, req.Exactly.Count, req.Exactly.AdminAccess, req.Exactly.Tolerations)
		if req.Exactly.Capacity != nil {
			alt.capacity = req.Exactly.Capacity.Requests
		}
		alt.derived = req.Exactly.DerivedAttributes
		return []alternative{alt}
	}
	var alts []alternative
	for _, sub := range req.FirstAvailable {
		alt := newAlternative(req.Name+"/"+sub.Name, sub.DeviceClassName, sub.Selectors, sub.AllocationMode, sub.Count, nil, sub.Tolerations)
		if sub.Capacity != nil {
			alt.capacity = sub.Capacity.Requests
		}
		alt.derived = sub.DerivedAttributes
		alts = append(alts, alt)
	}
	return alts
}

func newAlternative(name, class string, selectors []resourceapi.DeviceSelector, mode resourceapi.DeviceAllocationMode, count int64, admin *bool, tolerations []resourceapi.DeviceToleration) alternative {
	a := alternative{name: name, class: class, selectors: selectors, count: 1, adminAccess: admin != nil && *admin, tolerations: tolerations,
		all: mode == resourceapi.DeviceAllocationModeAll}
	if mode != resourceapi.DeviceAllocationModeAll && count > 1 {
		a.count = int(count)
	}
	return a
}

// extendedRequests are a pod's extended resources that a DeviceClass
// serves (extendedResources), as alternatives in the resource's name.
func (s *Snapshot) extendedRequests(pod *v1.Pod) []alternative {
	ext := s.extendedResources(pod)
	var out []alternative
	for _, name := range slices.Sorted(maps.Keys(ext)) {
		out = append(out, alternative{name: string(name), class: ext[name].class, count: int(ext[name].count)})
	}
	return out
}

func (s *Snapshot) whyRequest(ctx context.Context, claim *resourceapi.ResourceClaim, req resourceapi.DeviceRequest, holders map[string]string) (string, string, error) {
	alts := alternatives(req)
	for _, c := range claim.Spec.Devices.Constraints {
		if c.MatchAttribute != nil && (len(c.Requests) == 0 || slices.Contains(c.Requests, req.Name)) {
			for i := range alts {
				alts[i].match = *c.MatchAttribute
			}
		}
	}
	return s.whyAlternatives(ctx, claim.Namespace, fmt.Sprintf("request %q of claim %s", req.Name, claim.Name), alts, holders)
}

// whyTogether explains a claim whose requests each fit on their own but
// not together: a matchAttribute constraint over several requests (a GPU
// and a NIC under one PCIe root, of two drivers) that no node's free
// devices meet. For each node and value of the attribute that some
// request could use, it says what each request has free there and, where
// a request has too little, who holds the rest: "h100-0 pci0000:15: gpu:
// gpu-1 free; nic: none free (nic-0 to pair-0)". Requests with
// alternatives (firstAvailable) are left to the scheduler's message.
func (s *Snapshot) whyTogether(ctx context.Context, claim *resourceapi.ResourceClaim, holders map[string]string) (string, string, error) {
	byName := map[string]resourceapi.DeviceRequest{}
	for _, r := range claim.Spec.Devices.Requests {
		byName[r.Name] = r
	}
	for _, c := range claim.Spec.Devices.Constraints {
		if c.MatchAttribute == nil {
			continue
		}
		names := c.Requests
		if len(names) == 0 {
			for _, r := range claim.Spec.Devices.Requests {
				names = append(names, r.Name)
			}
		}
		if len(names) < 2 {
			continue
		}
		attr := string(*c.MatchAttribute)
		type side struct {
			request string
			count   int
			// free and busy are a place's (node and value) free devices
			// and why the others are not; pools are the nodes with any
			// device for the request.
			free, busy map[string][]string
			pools      map[string]bool
			// candidates and attributed count the matching devices, and
			// those that publish the attribute.
			candidates, attributed int
		}
		var sides []side
		places := map[string]bool{}
		for _, name := range names {
			req, ok := byName[name]
			if !ok || req.Exactly == nil {
				return "", "", nil
			}
			alt := alternatives(req)[0]
			candidates, err := s.matching(ctx, alt)
			if err != nil {
				return "", "", nil // whyRequest has said what it could
			}
			sd := side{request: name, count: alt.count, free: map[string][]string{}, busy: map[string][]string{}, pools: map[string]bool{}}
			sd.candidates = len(candidates)
			states := s.classifyAll(candidates, alt, claim.Namespace, holders)
			for i, d := range candidates {
				// Places are nodes (a device's pool where several
				// nodes reach it): two drivers' pools on one node
				// meet there.
				where := d.node
				if where == "" {
					where = d.pool
				}
				sd.pools[where] = true
				// What the constraint sees: the request's derived
				// attribute, evaluated as the allocator does, else the
				// device's; a list is in the place of each of its values.
				a, ok := constraintAttribute(ctx, req.Exactly.DerivedAttributes, d.driver, d.dev, *c.MatchAttribute)
				values := attributeValues(a)
				if !ok || len(values) == 0 {
					continue // meets no matchAttribute
				}
				sd.attributed++
				state, detail := states[i].state, states[i].detail
				for _, v := range values {
					place := where + " " + v
					places[place] = true
					switch state {
					case available:
						sd.free[place] = append(sd.free[place], d.dev.Name)
					case heldByClaim, noRoom, tainted, noCounter, apart:
						sd.busy[place] = append(sd.busy[place], strings.TrimPrefix(detail, d.pool+"/"))
					}
				}
			}
			sides = append(sides, sd)
		}
		// Only nodes with devices for every request can hold the claim;
		// the others are named once.
		lacking := map[string][]string{}
		var parts []string
		for _, place := range slices.Sorted(maps.Keys(places)) {
			pool, value, _ := strings.Cut(place, " ")
			fits, everywhere := true, true
			var what []string
			for _, sd := range sides {
				if !sd.pools[pool] {
					everywhere = false
					if !slices.Contains(lacking[sd.request], pool) {
						lacking[sd.request] = append(lacking[sd.request], pool)
					}
					continue
				}
				free, busy := sd.free[place], sd.busy[place]
				switch {
				case len(free) >= sd.count:
					what = append(what, fmt.Sprintf("%s: %s free", sd.request, strings.Join(free, ", ")))
					continue
				case len(free) == 0 && len(busy) == 0:
					what = append(what, fmt.Sprintf("%s: none under %s", sd.request, value))
				case len(busy) > 0:
					what = append(what, fmt.Sprintf("%s: %d free of %d needed (%s)", sd.request, len(free), sd.count, strings.Join(busy, "; ")))
				default:
					what = append(what, fmt.Sprintf("%s: %d free of %d needed", sd.request, len(free), sd.count))
				}
				fits = false
			}
			if !everywhere {
				continue
			}
			if fits {
				return "", "", nil
			}
			parts = append(parts, place+": "+strings.Join(what, "; "))
		}
		for _, sd := range sides {
			if sd.candidates > 0 && sd.attributed == 0 {
				parts = append(parts, fmt.Sprintf("none of the %d devices matching request %s has %s (published, or derived by the request)", sd.candidates, sd.request, attr))
			}
		}
		for _, sd := range sides {
			if pools := lacking[sd.request]; len(pools) > 0 {
				parts = append(parts, fmt.Sprintf("no device for request %s on %s", sd.request, strings.Join(pools, ", ")))
			}
		}
		msg := fmt.Sprintf("claim %s: requests %s must share %s on one node, and no node has enough of each free under one value", claim.Name, strings.Join(names, " and "), attr)
		if len(parts) > 0 {
			msg += ": " + strings.Join(parts, " | ")
		}
		return ConstraintUnmet, msg, nil
	}
	return "", "", nil
}

// sharing groups devices by node (pool) and the value of an attribute,
// and returns the largest group's size and a description of the groups;
// a device without the attribute is a group of its own.
func sharing(ctx context.Context, devs []deviceRef, attr resourceapi.FullyQualifiedName, derived []resourceapi.DeviceDerivedAttribute) (int, string) {
	groups := map[string][]string{}
	missing := 0
	for _, d := range devs {
		// What the constraint compares, as for several requests: the
		// request's derived attribute, else the device's; a list stands
		// in the group of each of its values; a device without it meets
		// no constraint over it.
		a, ok := constraintAttribute(ctx, derived, d.driver, d.dev, attr)
		values := attributeValues(a)
		if !ok || len(values) == 0 {
			missing++
			continue
		}
		place := d.node
		if place == "" {
			place = d.pool
		}
		for _, v := range values {
			k := place + " " + v
			groups[k] = append(groups[k], d.dev.Name)
		}
	}
	largest := 0
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		largest = max(largest, len(groups[k]))
		place, v, _ := strings.Cut(k, " ")
		parts = append(parts, fmt.Sprintf("%s: %s on %s", place, strings.Join(groups[k], ", "), v))
	}
	if missing > 0 {
		parts = append(parts, fmt.Sprintf("%d without %s", missing, attr))
	}
	return largest, strings.Join(limitList(parts, 8), "; ")
}

// deviceState is whether a request could have a device now, and why not.
type deviceState int

const (
	available deviceState = iota
	// tooBig: the request asks more of a shared device than one share
	// may ever take; noRoom: too little is left of it.
	tooBig
	noRoom
	// heldByClaim: another claim has the device to itself.
	heldByClaim
	// tainted: a taint the request does not tolerate.
	tainted
	// noCounter: allocated partitions hold its counters.
	noCounter
	// apart: what is allocated on its counter set shares no
	// compatibility group with it.
	apart
)

// classify says whether alt could have device c now and, if not, why, in
// words that name the device and what holds it.
func (s *Snapshot) classify(c deviceRef, alt alternative, namespace string, holders map[string]string) (deviceState, string) {
	holder, held := holders[c.driver+"/"+c.String()]
	shared := c.dev.AllowMultipleAllocations != nil && *c.dev.AllowMultipleAllocations
	var never, short string
	if shared && !alt.adminAccess {
		never, short = s.capacityShortage(c, alt, namespace)
	}
	if never != "" {
		return tooBig, never
	}
	// The allocator checks counters for admin access too: an admin claim
	// for a partitioned GPU whose counters another claim holds is
	// refused.
	var counters, groups string
	if !shared && (!held || alt.adminAccess) {
		counters = s.counterShortage(c, namespace)
		if counters == "" {
			groups = s.groupShortage(c, namespace)
		}
	}
	blocking := s.blockingTaints(c, alt.tolerations)
	switch {
	case short != "":
		return noRoom, short
	case held && !shared && !alt.adminAccess:
		return heldByClaim, fmt.Sprintf("%s to %s", c, strings.TrimPrefix(holder, namespace+"/"))
	case len(blocking) > 0:
		return tainted, fmt.Sprintf("%s (%s)", c, strings.Join(blocking, ", "))
	case counters != "":
		return noCounter, counters
	case groups != "":
		return apart, groups
	}
	return available, ""
}

// classifyAll classifies each device an alternative matched (refs, as
// matching found them). Against the snapshot's own holders, the states
// are found once a snapshot for what decides them: explaining a pod and
// listing its candidates classify the same devices.
func (s *Snapshot) classifyAll(refs []deviceRef, alt alternative, namespace string, holders map[string]string) []classified {
	each := func() []classified {
		out := make([]classified, len(refs))
		for i, c := range refs {
			out[i].state, out[i].detail = s.classify(c, alt, namespace, holders)
		}
		return out
	}
	c := s.matchCache
	if c == nil || len(refs) == 0 || !sameMap(holders, s.AllocatedDevices()) {
		return each()
	}
	key, err := classifyKey(alt, namespace)
	if err != nil {
		return each()
	}
	c.mu.Lock()
	got, ok := c.classified[key]
	c.mu.Unlock()
	if ok && len(got) == len(refs) {
		return got
	}
	got = each()
	c.mu.Lock()
	if c.classified == nil {
		c.classified = map[string][]classified{}
	}
	c.classified[key] = got
	c.mu.Unlock()
	return got
}

// classifyKey is what decides how classify sees an alternative's devices:
// the devices it matched (its class and selectors), the claim's namespace
// (holders are named from it), admin access, tolerations and the capacity
// a share asks.
func classifyKey(alt alternative, namespace string) (string, error) {
	decides, err := json.Marshal(struct {
		Admin       bool                                            `json:"a"`
		Tolerations []resourceapi.DeviceToleration                  `json:"t"`
		Capacity    map[resourceapi.QualifiedName]resource.Quantity `json:"c"`
	}{alt.adminAccess, alt.tolerations, alt.capacity})
	if err != nil {
		return "", err
	}
	return matchKey(alt) + "\x00" + namespace + "\x00" + string(decides), nil
}

// sameMap tells whether a and b are one map.
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// whyAlternatives explains why none of a request's alternatives can be
// satisfied, or returns no code when one can as far as devices go.
func (s *Snapshot) whyAlternatives(ctx context.Context, namespace, what string, alts []alternative, holders map[string]string) (string, string, error) {
	var (
		anyMatch         bool
		allocated, taint []string
		classes          []string
		// Partitioned and shared devices: no counter left, no capacity
		// left, or a request larger than the device.
		counters, shares, never []string
		// Free devices that what is allocated beside them keeps out by
		// compatibility groups.
		incompatible []deviceRef
		// constrained: alternatives with enough free devices, none of
		// whose sets meets the match constraint; short: the free devices
		// of alternatives with too few.
		constrained, short []string
		// apartNodes: alternatives with enough free devices in the
		// cluster, but not on one node.
		apartNodes []string
		// allMode: allocationMode All alternatives with a device not
		// free on every node.
		allMode []string
	)
	for _, alt := range alts {
		classes = append(classes, alt.class)
		candidates, err := s.matching(ctx, alt)
		if selErr := (*selectorError)(nil); errors.As(err, &selErr) {
			return SelectorError, fmt.Sprintf("%s: %v", what, selErr), nil
		}
		if err != nil {
			return "", "", err
		}
		if len(candidates) == 0 {
			continue
		}
		var free []deviceRef
		states := s.classifyAll(candidates, alt, namespace, holders)
		for i, c := range candidates {
			state, detail := states[i].state, states[i].detail
			if state == tooBig {
				never = append(never, detail)
				continue
			}
			anyMatch = true
			switch state {
			case noRoom:
				shares = append(shares, detail)
			case heldByClaim:
				allocated = append(allocated, detail)
			case tainted:
				taint = append(taint, detail)
			case noCounter:
				counters = append(counters, detail)
			case apart:
				incompatible = append(incompatible, c)
			default:
				free = append(free, c)
			}
		}
		if alt.all {
			// allocationMode All takes every matching device a node
			// reaches: one held or tainted there blocks the node.
			if s.allFreeOnANode(candidates, free) {
				return "", "", nil
			}
			allMode = append(allMode, alt.name)
			continue
		}
		if len(free) >= alt.count && alt.match != "" && alt.count > 1 {
			largest, groups := sharing(ctx, free, alt.match, alt.derived)
			if largest >= alt.count {
				return "", "", nil
			}
			constrained = append(constrained, fmt.Sprintf("%s needs %d devices of one node sharing %s; of the %d free matching devices, at most %d do (%s)", alt.name, alt.count, alt.match, len(free), largest, groups))
			continue
		}
		// A claim's devices are on one node: enough free in the cluster
		// is not enough on any node.
		most, perNode := s.onOneNode(free)
		if most >= alt.count {
			return "", "", nil // this alternative fits as far as devices go
		}
		if len(free) >= alt.count {
			apartNodes = append(apartNodes, fmt.Sprintf("%s needs %d devices on one node, and %d matching devices are free, but at most %d on any node (%s)", alt.name, alt.count, len(free), most, perNode))
			continue
		}
		if len(free) > 0 {
			var names []string
			for _, f := range free {
				names = append(names, f.String())
			}
			short = append(short, fmt.Sprintf("%s needs %d, and %d matching devices are free (%s)", alt.name, alt.count, len(free), strings.Join(names, ", ")))
		}
	}
	switch {
	case !anyMatch && len(never) > 0:
		return NoMatchingDevice, fmt.Sprintf("%s: no matching device can ever hold it: %s", what, strings.Join(never, "; ")), nil
	case !anyMatch:
		if pools := s.incompleteMatches(ctx, alts); len(pools) > 0 {
			return PoolIncomplete, fmt.Sprintf("%s: the matching devices are in pools the allocator takes nothing from until all their slices are published: %s", what, strings.Join(pools, "; ")), nil
		}
		return NoMatchingDevice, fmt.Sprintf("%s: no device in the cluster matches class %s and its selectors", what, strings.Join(dedupe(classes), " or ")), nil
	case len(allMode) > 0 && len(allocated)+len(taint) > 0:
		sort.Strings(allocated)
		sort.Strings(taint)
		code, parts := AllAllocated, []string{}
		if len(allocated) > 0 {
			parts = append(parts, "allocated: "+strings.Join(allocated, ", "))
		} else {
			code = Tainted
		}
		if len(taint) > 0 {
			parts = append(parts, "tainted, and not tolerated: "+strings.Join(taint, ", "))
		}
		return code, fmt.Sprintf("%s: allocationMode All takes every matching device of a node, and on every node some are not free: %s", what, strings.Join(parts, "; ")), nil
	case len(constrained) > 0:
		return ConstraintUnmet, fmt.Sprintf("%s: %s", what, strings.Join(constrained, "; ")), nil
	case len(apartNodes) > 0:
		return NotOnOneNode, fmt.Sprintf("%s: %s", what, strings.Join(apartNodes, "; ")), nil
	case len(shares) > 0 || len(counters) > 0 || len(incompatible) > 0:
		code := CapacityExhausted
		switch {
		case len(shares) > 0:
		case len(counters) > 0:
			code = CounterExhausted
		default:
			code = IncompatibleGroups
		}
		parts := append(append(append([]string{}, shares...), counters...), s.groupConflicts(incompatible, namespace)...)
		if len(allocated) > 0 {
			sort.Strings(allocated)
			parts = append(parts, fmt.Sprintf("allocated: %s", strings.Join(allocated, ", ")))
		}
		return code, fmt.Sprintf("%s: %s", what, strings.Join(parts, "; ")), nil
	case len(allocated) > 0 && len(short) > 0:
		sort.Strings(allocated)
		return AllAllocated, fmt.Sprintf("%s: %s; allocated: %s", what, strings.Join(short, "; "), strings.Join(allocated, ", ")), nil
	case len(allocated) > 0 && len(taint) > 0:
		sort.Strings(allocated)
		sort.Strings(taint)
		return AllAllocated, fmt.Sprintf("%s: every matching device is allocated or tainted: allocated: %s; tainted, and not tolerated: %s", what, strings.Join(allocated, ", "), strings.Join(taint, ", ")), nil
	case len(allocated) > 0:
		sort.Strings(allocated)
		return AllAllocated, fmt.Sprintf("%s: all %d matching devices are allocated: %s", what, len(allocated), strings.Join(allocated, ", ")), nil
	case len(taint) > 0:
		sort.Strings(taint)
		return Tainted, fmt.Sprintf("%s: the free matching devices are tainted, and not tolerated: %s", what, strings.Join(taint, ", ")), nil
	default:
		return TooFew, fmt.Sprintf("%s: fewer devices match than it needs, held or not: %s", what, strings.Join(short, "; ")), nil
	}
}

// TooFew: fewer devices match a request than it asks for, allocated or
// not: freeing devices would not help.
const TooFew = "TooFew"

// allFreeOnANode tells whether some node reaches matching devices and all
// of those it reaches are free: what an allocationMode All request needs.
func (s *Snapshot) allFreeOnANode(candidates, free []deviceRef) bool {
	isFree := map[*resourceapi.Device]bool{}
	for _, f := range free {
		isFree[f.dev] = true
	}
	reaches := func(d deviceRef, node string) bool {
		if d.node != "" {
			return d.node == node
		}
		n := s.Nodes[node]
		return n == nil || d.reaches(n)
	}
	nodes := map[string]bool{}
	for _, c := range candidates {
		switch {
		case c.node != "":
			nodes[c.node] = true
		default:
			for name, n := range s.Nodes {
				if c.reaches(n) {
					nodes[name] = true
				}
			}
		}
	}
	if len(nodes) == 0 {
		// Devices for any node, the nodes unread: all must be free.
		return len(candidates) > 0 && len(free) == len(candidates)
	}
	for node := range nodes {
		ok := true
		for _, c := range candidates {
			if reaches(c, node) && !isFree[c.dev] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// incompleteMatches names the incomplete pools with devices that match
// one of the alternatives, with how many of their slices are published.
func (s *Snapshot) incompleteMatches(ctx context.Context, alts []alternative) []string {
	pools := s.IncompletePools()
	if len(pools) == 0 {
		return nil
	}
	var out []string
	for _, p := range pools {
		var in []*resourceapi.ResourceSlice
		for i := range s.Slices {
			sl := &s.Slices[i]
			if sl.Spec.Driver == p.Driver && sl.Spec.Pool.Name == p.Name && sl.Spec.Pool.Generation == p.Generation {
				in = append(in, sl)
			}
		}
		for _, alt := range alts {
			class := s.Classes[alt.class]
			if class == nil {
				continue
			}
			if refs, err := s.match(ctx, slices.Concat(class.Spec.Selectors, alt.selectors), in); err == nil && len(refs) > 0 {
				out = append(out, p.String())
				break
			}
		}
	}
	return out
}

// onOneNode says how many of the free devices one node can reach at most,
// and, in words, how many each node reaches: "n1 4, n2 4". Where the
// snapshot has its nodes, each device counts on the nodes it reaches (a
// rack's devices on the rack's nodes); without them, a device several
// nodes reach counts on every node.
func (s *Snapshot) onOneNode(free []deviceRef) (int, string) {
	perNode, anywhere := map[string]int{}, 0
	for _, d := range free {
		switch {
		case d.node != "":
			perNode[d.node]++
		case len(s.Nodes) > 0:
			for name, n := range s.Nodes {
				if d.reaches(n) {
					perNode[name]++
				}
			}
		default:
			anywhere++
		}
	}
	most := 0
	var words []string
	for _, n := range slices.Sorted(maps.Keys(perNode)) {
		most = max(most, perNode[n])
		words = append(words, fmt.Sprintf("%s %d", n, perNode[n]))
	}
	if anywhere > 0 {
		words = append(words, fmt.Sprintf("reachable from any node %d", anywhere))
	}
	return most + anywhere, strings.Join(limitList(words, 8), ", ")
}

// blockingTaints are the taints of a device that tolerations do not
// tolerate, each taint matched on its own.
func (s *Snapshot) blockingTaints(d deviceRef, tolerations []resourceapi.DeviceToleration) []string {
	st := s.state()
	return taintStrings(devices.Untolerated(st.Taints(devices.Device{Driver: d.driver, Pool: d.pool, Device: *d.dev}), tolerations))
}

// selectorError is a selector that fails on a device.
type selectorError struct {
	expression string
	device     deviceRef
	err        error
	// compile: the expression does not compile, whatever the device.
	compile bool
}

func (e *selectorError) Error() string {
	if e.compile {
		return fmt.Sprintf("selector %q does not compile: %v; no device can match it", e.expression, e.err)
	}
	return fmt.Sprintf("selector %q fails on device %s: %v; the allocator then gives up the claim instead of trying other devices: guard the attribute with has() or read it with .orValue()", e.expression, e.device, e.err)
}

// AllocatedDevices maps each device allocated without admin access
// (driver/pool/device) to the claim that holds it (namespace/name). The
// map of a snapshot of NewSnapshot is made once and shared: read it only.
func (s *Snapshot) AllocatedDevices() map[string]string {
	c := s.matchCache
	if c == nil {
		return s.allocatedDevices()
	}
	c.allocatedOnce.Do(func() { c.allocated = s.allocatedDevices() })
	return c.allocated
}

func (s *Snapshot) allocatedDevices() map[string]string {
	held := s.state().Held()
	m := make(map[string]string, len(held))
	for k, claim := range held {
		m[k.String()] = claim
	}
	return m
}

// FreeDevices are the devices of driver the allocator could give now to a
// request without tolerations (devices.State.Free: untainted, unheld, with
// room in their counters and compatibility groups), as driver/pool/device.
func (s *Snapshot) FreeDevices(driver string) map[string]bool {
	m := map[string]bool{}
	for _, d := range s.state().Free(driver, "") {
		m[d.Key().String()] = true
	}
	return m
}

// matching lists the devices that match an alternative's class and
// selectors.
func (s *Snapshot) matching(ctx context.Context, alt alternative) ([]deviceRef, error) {
	class := s.Classes[alt.class]
	if class == nil {
		return nil, nil
	}
	selectors := append(append([]resourceapi.DeviceSelector{}, class.Spec.Selectors...), alt.selectors...)
	// The same alternative is matched once a snapshot: explaining a pod
	// and listing its candidates read the same devices.
	key := matchKey(alt)
	c := s.matchCache
	if c == nil {
		return s.match(ctx, selectors, s.currentSlices())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.found[key]; ok {
		return m.refs, m.err
	}
	// Only the slices the allocator reads: the newest generation of each
	// pool, of pools wholly published (IncompletePools says which are
	// not).
	refs, err := s.match(ctx, selectors, s.currentSlices())
	c.found[key] = matched{refs, err}
	return refs, err
}

// matchKey keys what matching finds for an alternative: its class (whose
// selectors a snapshot's class name decides) and its own selectors.
func matchKey(alt alternative) string {
	key := alt.class
	for _, sel := range alt.selectors {
		if sel.CEL != nil {
			key += "\x00" + sel.CEL.Expression
		}
	}
	return key
}

// matchCache keeps what matching found, by alternative, for a snapshot,
// and the holders of its allocated devices.
type matchCache struct {
	mu    sync.Mutex
	found map[string]matched

	holdersOnce sync.Once
	holders     map[string][]Holder

	allocatedOnce sync.Once
	allocated     map[string]string

	// classified are the states of the devices an alternative matched,
	// by what decides them (classifyKey), against the snapshot's own
	// holders.
	classified map[string][]classified
}

// classified is a device's state for an alternative, and its detail.
type classified struct {
	state  deviceState
	detail string
}

// matched is what matching found for an alternative.
type matched struct {
	refs []deviceRef
	err  error
}

// match lists the published devices every selector matches, each selector
// compiled once.
func (s *Snapshot) match(ctx context.Context, selectors []resourceapi.DeviceSelector, current []*resourceapi.ResourceSlice) ([]deviceRef, error) {
	compiled, exprs, compileErr := compileAll(selectors)
	if compileErr != nil {
		// A selector that does not compile is the claim's or the class's
		// fault, said as such, not an error of the report; where there is
		// no device, there is nothing to say.
		for i := range s.Slices {
			if sl := &s.Slices[i]; len(sl.Spec.Devices) > 0 {
				compileErr.device = newDeviceRef(sl, &sl.Spec.Devices[0])
				return nil, compileErr
			}
		}
		return nil, nil
	}
	// The slices in as many parts as there are processors, each matched
	// on its own (a compiled program may be evaluated concurrently), the
	// parts' devices then joined in the slices' order.
	parts := min(runtime.GOMAXPROCS(0), max(1, len(current)/64))
	found := make([][]deviceRef, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() {
			memo := newSelectorMemo(compiled)
			for _, sl := range current[p*len(current)/parts : (p+1)*len(current)/parts] {
				for j := range sl.Spec.Devices {
					d := &sl.Spec.Devices[j]
					ref := newDeviceRef(sl, d)
					ok, err := matchesAll(ctx, compiled, exprs, ref, memo)
					if err != nil {
						errs[p] = err
						return
					}
					if ok {
						found[p] = append(found[p], ref)
					}
				}
			}
		})
	}
	wg.Wait()
	var out []deviceRef
	for p := range parts {
		if errs[p] != nil {
			return nil, errs[p]
		}
		out = append(out, found[p]...)
	}
	return out, nil
}

// compileAll compiles the CEL selectors, or says which does not compile.
func compileAll(selectors []resourceapi.DeviceSelector) (devices.Selectors, []string, *selectorError) {
	var compiled devices.Selectors
	var exprs []string
	for _, sel := range selectors {
		if sel.CEL == nil {
			continue
		}
		c, err := devices.CompileSelectors(sel.CEL.Expression)
		if err != nil {
			return nil, nil, &selectorError{expression: sel.CEL.Expression, err: err, compile: true}
		}
		compiled = append(compiled, c...)
		exprs = append(exprs, sel.CEL.Expression)
	}
	return compiled, exprs, nil
}

// InClass reports whether a device of a slice is one of a DeviceClass's:
// the class exists and its selectors select the device. A selector that
// fails on the device (or does not compile) selects nothing, as no claim
// of the class could be given the device.
func (s *Snapshot) InClass(ctx context.Context, class string, sl *resourceapi.ResourceSlice, dev *resourceapi.Device) bool {
	c := s.Classes[class]
	if c == nil {
		return false
	}
	compiled, exprs, compileErr := compileAll(c.Spec.Selectors)
	if compileErr != nil {
		return false
	}
	ok, err := matchesAll(ctx, compiled, exprs, newDeviceRef(sl, dev), nil)
	return ok && err == nil
}

// matchesAll tells whether every compiled selector matches device d; one
// that fails on it is a selectorError. memo, where not nil, remembers the
// results by the values each selector reads.
func matchesAll(ctx context.Context, compiled devices.Selectors, exprs []string, d deviceRef, memo *selectorMemo) (bool, error) {
	dev := devices.Input(d.driver, d.dev)
	for k := range compiled {
		match, err := memo.matches(ctx, compiled, k, dev, d.dev)
		if err != nil {
			return false, &selectorError{expression: exprs[k], device: d, err: err}
		}
		if !match {
			return false, nil
		}
	}
	return true, nil
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
