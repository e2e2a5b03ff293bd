package allocation

import (
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// counterMaps keeps one map of counters of each content. A partitionable
// device's counter consumption is its profile's, the same on every GPU of
// a model; a cluster of them decodes one map per device and per counter
// set, most of a slice's size. A snapshot's objects are read, never
// written, so the devices of one profile may share one map.
type counterMaps map[string]map[string]resourceapi.Counter

// share says the map of c's content that m keeps, c where m has none.
func (m counterMaps) share(c map[string]resourceapi.Counter) map[string]resourceapi.Counter {
	if len(c) == 0 {
		return c
	}
	var key strings.Builder
	for _, name := range slices.Sorted(maps.Keys(c)) {
		v := c[name].Value
		key.WriteString(name)
		key.WriteByte('=')
		key.WriteString(v.String())
		key.WriteByte(';')
	}
	if kept, ok := m[key.String()]; ok {
		return kept
	}
	m[key.String()] = c
	return c
}

// shareCounters makes the slices' counter sets and devices' counter
// consumption share the maps of one content.
func (m counterMaps) shareCounters(sls []resourceapi.ResourceSlice) {
	for i := range sls {
		spec := &sls[i].Spec
		for j := range spec.SharedCounters {
			spec.SharedCounters[j].Counters = m.share(spec.SharedCounters[j].Counters)
		}
		for j := range spec.Devices {
			for k := range spec.Devices[j].ConsumesCounters {
				c := &spec.Devices[j].ConsumesCounters[k]
				c.Counters = m.share(c.Counters)
			}
		}
	}
}
