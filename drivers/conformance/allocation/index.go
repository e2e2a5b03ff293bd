package allocation

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
)

// index finds a snapshot's devices, counter sets and allocations by pool
// in one step each, built at the first question: a cluster of thousands
// of slices and claims is asked per candidate device.
type index struct {
	once sync.Once
	// devices by driver/pool/name, counter sets by driver/pool/set: the
	// first in the slices' order, as a scan finds it.
	devices  map[deviceKey]*resourceapi.Device
	counters map[deviceKey]map[string]resourceapi.Counter
	// allocated are the devices allocated without admin access, by
	// driver/pool, with their claim (namespace/name) and the published
	// device (nil when no slice publishes it any more).
	allocated map[poolKey][]allocatedDevice
}

type poolKey struct{ driver, pool string }

type deviceKey struct{ driver, pool, name string }

type allocatedDevice struct {
	claim  string
	result resourceapi.DeviceRequestAllocationResult
	dev    *resourceapi.Device
}

// indexInit guards the making of a snapshot's index.
var indexInit sync.Mutex

func (s *Snapshot) index() *index {
	indexInit.Lock()
	if s.idx == nil {
		s.idx = &index{}
	}
	x := s.idx
	indexInit.Unlock()
	x.once.Do(func() {
		x.devices = map[deviceKey]*resourceapi.Device{}
		x.counters = map[deviceKey]map[string]resourceapi.Counter{}
		for i := range s.Slices {
			sl := &s.Slices[i]
			for j := range sl.Spec.Devices {
				k := deviceKey{sl.Spec.Driver, sl.Spec.Pool.Name, sl.Spec.Devices[j].Name}
				if _, ok := x.devices[k]; !ok {
					x.devices[k] = &sl.Spec.Devices[j]
				}
			}
			for _, cs := range sl.Spec.SharedCounters {
				k := deviceKey{sl.Spec.Driver, sl.Spec.Pool.Name, cs.Name}
				if _, ok := x.counters[k]; !ok {
					x.counters[k] = cs.Counters
				}
			}
		}
		x.allocated = map[poolKey][]allocatedDevice{}
		s.state().Allocated(func(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) {
			k := poolKey{r.Driver, r.Pool}
			x.allocated[k] = append(x.allocated[k], allocatedDevice{claim: c.Namespace + "/" + c.Name, result: r,
				dev: x.devices[deviceKey{r.Driver, r.Pool, r.Device}]})
		})
	})
	return x
}
