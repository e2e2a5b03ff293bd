// Package devices reads what a cluster's DRA drivers publish and what its
// claims hold, and from the two which devices are free: the one reading
// that the conformance checks, the sanity layer and the scenarios' reports
// share. A free device is one the allocator could give now: published in
// the newest generation of its pool, held by no claim (admin access
// aside), and with room left in every counter it consumes.
package devices

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// State is a cluster's ResourceSlices and ResourceClaims, read together.
type State struct {
	Slices []resourceapi.ResourceSlice
	Claims []resourceapi.ResourceClaim
}

// Read lists the ResourceSlices of driver ("" for every driver's) and the
// ResourceClaims of every namespace.
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
	return &State{Slices: slices.Items, Claims: claims.Items}, nil
}

// Current returns the slices of driver on node ("" for any) of the newest
// generation of each pool: those the allocator considers.
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
	for _, sl := range s.Slices {
		// Filtered here too: a server may ignore a field selector.
		if driver != "" && sl.Spec.Driver != driver || node != "" && ptr.Deref(sl.Spec.NodeName, "") != node {
			continue
		}
		if sl.Spec.Pool.Generation == newest[poolKey{sl.Spec.Driver, sl.Spec.Pool.Name}] {
			out = append(out, sl)
		}
	}
	return out
}

// Published returns the devices of the Current slices, in publication
// order.
func (s *State) Published(driver, node string) []Device {
	var out []Device
	for _, sl := range s.Current(driver, node) {
		for _, d := range sl.Spec.Devices {
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
// once the allocated devices have consumed theirs. An overcommitted
// counter is negative.
func (s *State) CountersLeft() Counters {
	left := Counters{}
	published := map[Key]Device{}
	for _, sl := range s.Current("", "") {
		for _, cs := range sl.Spec.SharedCounters {
			m := map[string]resource.Quantity{}
			for name, c := range cs.Counters {
				m[name] = c.Value.DeepCopy()
			}
			left[SetKey{sl.Spec.Driver, sl.Spec.Pool.Name, cs.Name}] = m
		}
		for _, d := range sl.Spec.Devices {
			dev := Device{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: d}
			published[dev.Key()] = dev
		}
	}
	s.Allocated(func(_ *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) {
		if d, ok := published[Key{r.Driver, r.Pool, r.Device}]; ok {
			left.Take(d)
		}
	})
	return left
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
// could give now, each on its own: published in the newest generation of
// its pool, held by no claim, and fitting the counters left.
func (s *State) Free(driver, node string) []Device {
	held := s.Held()
	left := s.CountersLeft()
	var out []Device
	for _, d := range s.Published(driver, node) {
		if _, ok := held[d.Key()]; !ok && left.Fits(d) {
			out = append(out, d)
		}
	}
	return out
}

// Together returns up to n of the given free devices that can all be
// allocated at once, first fit in their order: each one taken leaves less
// of the counters for the next.
func (s *State) Together(free []Device, n int) []Device {
	left := s.CountersLeft()
	var out []Device
	for _, d := range free {
		if len(out) == n {
			break
		}
		if left.Fits(d) {
			left.Take(d)
			out = append(out, d)
		}
	}
	return out
}
