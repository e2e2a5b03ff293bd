// Package devices reads what a cluster's DRA drivers publish and what its
// claims hold, and from the two which devices are free: the one reading
// that the conformance checks, the sanity layer and the scenarios' reports
// share. A free device is one the allocator could give now: published in
// the newest generation of its pool, held by no claim (admin access
// aside), with room left in every counter it consumes, and with no taint
// the request does not tolerate (NoSchedule or NoExecute, on the device in
// its slice or put there by a DeviceTaintRule).
package devices

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// Key names a device: its driver, pool and name.
type Key struct{ Driver, Pool, Device string }

func (k Key) String() string { return k.Driver + "/" + k.Pool + "/" + k.Device }

// Device is a published device, with where it was published.
type Device struct {
	Driver, Pool string
	// Node is the node of a node-local slice, "" for the others.
	Node string
	resourceapi.Device
}

// Key names the device.
func (d Device) Key() Key { return Key{d.Driver, d.Pool, d.Name} }

// SetKey names a counter set of a pool.
type SetKey struct{ Driver, Pool, Set string }

// Counters are what a pool's counter sets hold, by set and counter name.
type Counters map[SetKey]map[string]resource.Quantity

// State is a cluster's ResourceSlices, ResourceClaims and DeviceTaintRules,
// read together.
type State struct {
	Slices     []resourceapi.ResourceSlice
	Claims     []resourceapi.ResourceClaim
	TaintRules []resourceapi.DeviceTaintRule
	// Nodes are the cluster's nodes by name, where read (ReadNodes): a
	// device that a slice's or its own node selector or allNodes places
	// is then a node's too, as the allocator matches it. Without them, a
	// node's devices are those of the slices of its name.
	Nodes map[string]*v1.Node
}

// ReadNodes reads the cluster's nodes into the state, so that the devices
// of a node are every device it reaches.
func (s *State) ReadNodes(ctx context.Context, client kubernetes.Interface) error {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	s.Nodes = make(map[string]*v1.Node, len(list.Items))
	for i := range list.Items {
		s.Nodes[list.Items[i].Name] = &list.Items[i]
	}
	return nil
}

// reachFeatures are the allocator's features node selection is matched
// with: per-device node selection is partitionable devices'.
var reachFeatures = structured.Features{PartitionableDevices: true}

// Reaches tells whether device d of slice sl (nil: any device of it) is
// node's: published for it by name, or placed on it by the slice's or the
// device's own node selection (nodeSelector, allNodes), where the state
// holds the node (NodeReaches).
func (s *State) Reaches(sl *resourceapi.ResourceSlice, d *resourceapi.Device, node string) bool {
	if n := s.Nodes[node]; n != nil {
		return NodeReaches(sl, d, n)
	}
	// Nothing known of the node's labels: what is published for its name.
	return anyDevice(sl, d, func(d *resourceapi.Device) bool { return placement(sl, d).name == node })
}

// anyDevice tells whether f holds for device d of slice sl, or, d nil, for
// the slice (for any of its devices where each places itself).
func anyDevice(sl *resourceapi.ResourceSlice, d *resourceapi.Device, f func(*resourceapi.Device) bool) bool {
	if d != nil || !ptr.Deref(sl.Spec.PerDeviceNodeSelection, false) {
		return f(d)
	}
	for i := range sl.Spec.Devices {
		if f(&sl.Spec.Devices[i]) {
			return true
		}
	}
	return false
}

// selection is where a slice or a device places its devices: a node's
// name, every node, or a node selector.
type selection struct {
	name string
	all  bool
	sel  *v1.NodeSelector
}

// placement is device d's selection (its own under per-device node
// selection), else its slice's.
func placement(sl *resourceapi.ResourceSlice, d *resourceapi.Device) selection {
	if d != nil && ptr.Deref(sl.Spec.PerDeviceNodeSelection, false) {
		return selection{ptr.Deref(d.NodeName, ""), ptr.Deref(d.AllNodes, false), d.NodeSelector}
	}
	return selection{ptr.Deref(sl.Spec.NodeName, ""), ptr.Deref(sl.Spec.AllNodes, false), sl.Spec.NodeSelector}
}

// NodeReaches tells whether device d of slice sl (nil: any device of it)
// is placed on node, as the allocator matches node selection
// (structured.NodeMatches). A selector it cannot match is nobody's.
func NodeReaches(sl *resourceapi.ResourceSlice, d *resourceapi.Device, node *v1.Node) bool {
	return anyDevice(sl, d, func(d *resourceapi.Device) bool {
		p := placement(sl, d)
		ok, err := structured.NodeMatches(reachFeatures, node, p.name, p.all, p.sel)
		return err == nil && ok
	})
}

// Reached are the nodes of the state device d of slice sl reaches, sorted.
func (s *State) Reached(sl *resourceapi.ResourceSlice, d *resourceapi.Device) []string {
	var out []string
	for name := range s.Nodes {
		if s.Reaches(sl, d, name) {
			out = append(out, name)
		}
	}
	if name := ptr.Deref(sl.Spec.NodeName, ""); name != "" && s.Nodes[name] == nil {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Read lists the ResourceSlices of driver ("" for every driver's), the
// ResourceClaims of every namespace and the DeviceTaintRules (none where
// the cluster does not serve them).
func Read(ctx context.Context, client kubernetes.Interface, driver string) (*State, error) {
	opts := metav1.ListOptions{}
	if driver != "" {
		opts.FieldSelector = "spec.driver=" + driver
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	claims, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	st := &State{Slices: slices.Items, Claims: claims.Items}
	rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("listing DeviceTaintRules: %w", err)
	default:
		st.TaintRules = rules.Items
	}
	return st, nil
}

// Taints are the taints with an effect (NoSchedule, NoExecute) on d: its
// own, then those of the DeviceTaintRules that select it. A rule without
// a selector selects no device, as in Kubernetes 1.37's allocator.
func (s *State) Taints(d Device) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	add := func(t resourceapi.DeviceTaint) {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			out = append(out, t)
		}
	}
	for _, t := range d.Taints {
		add(t)
	}
	for _, r := range s.TaintRules {
		if sel := r.Spec.DeviceSelector; sel != nil &&
			(sel.Driver == nil || *sel.Driver == d.Driver) && (sel.Pool == nil || *sel.Pool == d.Pool) && (sel.Device == nil || *sel.Device == d.Name) {
			add(r.Spec.Taint)
		}
	}
	return out
}

// Untolerated returns the taints no toleration tolerates, each matched on
// its own (key, value, effect), as the allocator matches them.
func Untolerated(taints []resourceapi.DeviceTaint, tolerations []resourceapi.DeviceToleration) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, t := range taints {
		tolerated := false
		for _, tol := range tolerations {
			if resourceclaim.ToleratesTaint(tol, t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			out = append(out, t)
		}
	}
	return out
}

// Blocked returns the taints of d that keep it from a request with these
// tolerations.
func (s *State) Blocked(d Device, tolerations []resourceapi.DeviceToleration) []resourceapi.DeviceTaint {
	return Untolerated(s.Taints(d), tolerations)
}

// Current returns the slices of driver for node ("" for any: those with a
// device the node reaches, see Reaches) of the newest generation of each
// pool: those the allocator considers.
func (s *State) Current(driver, node string) []resourceapi.ResourceSlice {
	type poolKey struct{ driver, pool string }
	newest := map[poolKey]int64{}
	for _, sl := range s.Slices {
		k := poolKey{sl.Spec.Driver, sl.Spec.Pool.Name}
		if g, ok := newest[k]; !ok || sl.Spec.Pool.Generation > g {
			newest[k] = sl.Spec.Pool.Generation
		}
	}
	var out []resourceapi.ResourceSlice
	for i := range s.Slices {
		sl := s.Slices[i]
		// Filtered here too: a server may ignore a field selector.
		if driver != "" && sl.Spec.Driver != driver || node != "" && !s.Reaches(&s.Slices[i], nil, node) {
			continue
		}
		if sl.Spec.Pool.Generation == newest[poolKey{sl.Spec.Driver, sl.Spec.Pool.Name}] {
			out = append(out, sl)
		}
	}
	return out
}

// Published returns the devices of the Current slices that node ("" for
// any) reaches, in publication order.
func (s *State) Published(driver, node string) []Device {
	var out []Device
	for _, sl := range s.Current(driver, node) {
		for i, d := range sl.Spec.Devices {
			if node != "" && !s.Reaches(&sl, &sl.Spec.Devices[i], node) {
				continue
			}
			out = append(out, Device{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Node: ptr.Deref(sl.Spec.NodeName, ""), Device: d})
		}
	}
	return out
}

// Allocated calls f for every device result of an allocated claim, but
// those with admin access, which hold no device.
func (s *State) Allocated(f func(claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult)) {
	for i := range s.Claims {
		c := &s.Claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if !ptr.Deref(r.AdminAccess, false) {
				f(c, r)
			}
		}
	}
}

// Held maps every allocated device to the first claim (namespace/name)
// holding it.
func (s *State) Held() map[Key]string {
	out := map[Key]string{}
	s.Allocated(func(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) {
		k := Key{r.Driver, r.Pool, r.Device}
		if _, ok := out[k]; !ok {
			out[k] = c.Namespace + "/" + c.Name
		}
	})
	return out
}

// CountersLeft is what the counter sets of the Current slices have left
// once the allocated devices have consumed theirs, each device once: a
// device that allows multiple allocations consumes its counters once
// however many claims share it, as in Kubernetes 1.37's allocator. An
// overcommitted counter is negative.
func (s *State) CountersLeft() Counters {
	left := Counters{}
	for _, sl := range s.Current("", "") {
		for _, cs := range sl.Spec.SharedCounters {
			m := map[string]resource.Quantity{}
			for name, c := range cs.Counters {
				m[name] = c.Value.DeepCopy()
			}
			left[SetKey{sl.Spec.Driver, sl.Spec.Pool.Name, cs.Name}] = m
		}
	}
	s.eachAllocatedDevice(left.Take)
	return left
}

// eachAllocatedDevice calls f once with each allocated device, as the
// Current slices publish it. Once, not once per allocation result: the
// allocator charges counters to a device that is allocated, and the shares
// of a device that allows multiple allocations (several results, with
// distinct shareIDs) are one device.
func (s *State) eachAllocatedDevice(f func(Device)) {
	published := map[Key]Device{}
	for _, sl := range s.Current("", "") {
		for _, d := range sl.Spec.Devices {
			dev := Device{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: d}
			published[dev.Key()] = dev
		}
	}
	seen := map[Key]bool{}
	s.Allocated(func(_ *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) {
		k := Key{r.Driver, r.Pool, r.Device}
		if d, ok := published[k]; ok && !seen[k] {
			seen[k] = true
			f(d)
		}
	})
}

// Fits reports whether the counters have room for everything d consumes.
// A counter its pool does not publish has none.
func (c Counters) Fits(d Device) bool {
	for _, cons := range d.ConsumesCounters {
		have := c[SetKey{d.Driver, d.Pool, cons.CounterSet}]
		for name, q := range cons.Counters {
			if h, ok := have[name]; !ok || h.Cmp(q.Value) < 0 {
				return false
			}
		}
	}
	return true
}

// Take subtracts what d consumes from the counters.
func (c Counters) Take(d Device) {
	for _, cons := range d.ConsumesCounters {
		have := c[SetKey{d.Driver, d.Pool, cons.CounterSet}]
		for name, q := range cons.Counters {
			if h, ok := have[name]; ok {
				h.Sub(q.Value)
				have[name] = h
			}
		}
	}
}

// Free returns the devices of driver on node ("" for any) the allocator
// could give now to a request without tolerations, each on its own:
// published in the newest generation of its pool, held by no claim,
// fitting the counters left and the compatibility groups of what is
// allocated on them, and untainted.
func (s *State) Free(driver, node string) []Device {
	return s.FreeFor(driver, node, nil)
}

// FreeFor is Free for a request with tolerations: a device whose every
// taint they tolerate is free.
func (s *State) FreeFor(driver, node string, tolerations []resourceapi.DeviceToleration) []Device {
	held := s.Held()
	left, groups := s.CountersLeft(), s.GroupsHeld()
	var out []Device
	for _, d := range s.Published(driver, node) {
		if _, ok := held[d.Key()]; !ok && left.Fits(d) && groups.Admits(d) && len(s.Blocked(d, tolerations)) == 0 {
			out = append(out, d)
		}
	}
	return out
}

// Together returns up to n of the given free devices that can all be
// allocated at once, first fit in their order: each one taken leaves less
// of the counters for the next, and narrows their compatibility groups.
func (s *State) Together(free []Device, n int) []Device {
	left, groups := s.CountersLeft(), s.GroupsHeld()
	var out []Device
	for _, d := range free {
		if len(out) == n {
			break
		}
		if left.Fits(d) && groups.Admits(d) {
			left.Take(d)
			groups.Take(d)
			out = append(out, d)
		}
	}
	return out
}

// Attribute is the value of a device's attribute as a container would print
// it, by its qualified name: "resource.kubernetes.io/pcieRoot", or one of
// the driver's own, which a slice spells with or without the driver's
// domain. False when the device lacks it or it is a list.
func Attribute(driver string, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name string) (string, bool) {
	a, ok := attrs[resourceapi.QualifiedName(name)]
	if id, own := strings.CutPrefix(name, driver+"/"); !ok && own {
		a, ok = attrs[resourceapi.QualifiedName(id)]
	}
	if !ok {
		return "", false
	}
	return AttributeString(a)
}

// AttributeString is an attribute's value as a container would print it;
// false for a list or an empty attribute.
func AttributeString(a resourceapi.DeviceAttribute) (string, bool) {
	switch {
	case a.StringValue != nil:
		return *a.StringValue, true
	case a.VersionValue != nil:
		return *a.VersionValue, true
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue), true
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue), true
	}
	return "", false
}
