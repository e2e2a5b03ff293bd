package nodedrivers

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/lab/config"
)

// Slices are a cluster's ResourceSlices, by driver and node, as readiness
// reads them.
type Slices struct {
	// devices are the devices of a driver's pool named after a node.
	devices map[driverNode][]resourceapi.Device
	// complete says whether a driver's pools on a node are published
	// whole.
	complete map[driverNode]bool
	// pools are every pool's newest generation, node-local or not.
	pools map[driverPool]*poolGeneration
}

type driverPool struct{ driver, pool string }

// poolGeneration is what is published of a pool's newest generation.
type poolGeneration struct {
	gen, have, count int64
	devices          int
}

// add counts a slice of the pool: a newer generation starts afresh, an
// older one is left out.
func (p *poolGeneration) add(sl *resourceapi.ResourceSlice) {
	switch {
	case sl.Spec.Pool.Generation > p.gen || p.count == 0:
		*p = poolGeneration{gen: sl.Spec.Pool.Generation, have: 1, count: sl.Spec.Pool.ResourceSliceCount, devices: len(sl.Spec.Devices)}
	case sl.Spec.Pool.Generation == p.gen:
		p.have++
		p.devices += len(sl.Spec.Devices)
	}
}

// Pool is how many devices a driver's pool has in its newest generation
// (any pool: a node's, or one several nodes reach), and whether that
// generation is published whole.
func (s *Slices) Pool(driver, pool string) (devices int, complete bool) {
	p := s.pools[driverPool{driver, pool}]
	if p == nil {
		return 0, false
	}
	return p.devices, p.have == p.count
}

type driverNode struct{ driver, node string }

// IndexSlices indexes a cluster's ResourceSlices.
func IndexSlices(rs []resourceapi.ResourceSlice) *Slices {
	s := &Slices{devices: map[driverNode][]resourceapi.Device{}, complete: map[driverNode]bool{}, pools: map[driverPool]*poolGeneration{}}
	// A pool of several slices (a partitioned node's counter sets and MIG
	// devices) is published one slice at a time: it is whole once the
	// slices of its newest generation are as many as they say.
	type poolKey struct{ driver, node, pool string }
	pools := map[poolKey]*poolGeneration{}
	var order []poolKey
	for i := range rs {
		sl := &rs[i]
		dn := driverNode{sl.Spec.Driver, sl.Spec.Pool.Name}
		s.devices[dn] = append(s.devices[dn], sl.Spec.Devices...)
		dp := driverPool{sl.Spec.Driver, sl.Spec.Pool.Name}
		if s.pools[dp] == nil {
			s.pools[dp] = &poolGeneration{}
		}
		s.pools[dp].add(sl)
		if sl.Spec.NodeName == nil {
			continue
		}
		key := poolKey{sl.Spec.Driver, *sl.Spec.NodeName, sl.Spec.Pool.Name}
		if pools[key] == nil {
			order = append(order, key)
			pools[key] = &poolGeneration{}
		}
		pools[key].add(sl)
	}
	// A node's pools are whole when each is.
	seen := map[driverNode]bool{}
	for _, key := range order {
		dn, p := driverNode{key.driver, key.node}, pools[key]
		s.complete[dn] = (s.complete[dn] || !seen[dn]) && p.have == p.count
		seen[dn] = true
	}
	return s
}

// Of is what node shows of a driver.
func (s *Slices) Of(driver string, node *v1.Node) Published {
	return Published{Node: node, Devices: s.devices[driverNode{driver, node.Name}], Complete: s.complete[driverNode{driver, node.Name}]}
}

// NotReady says what lab node n (registered as node) still lacks of the
// devices of its drivers, and the role of the driver whose log explains
// it; "" once every driver has published what the configuration says.
func (s *Slices) NotReady(cfg *config.Config, n config.Node, node *v1.Node) (why, role string) {
	for _, k := range Of(cfg, n) {
		if why := k.NotReady(cfg, n, s.Of(k.Driver(cfg), node)); why != "" {
			return why, k.Role()
		}
	}
	return "", ""
}
