package nodedrivers

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// A pool that no one node owns is indexed as a node's is: its newest
// generation alone, whole once its slices are as many as they say.
func TestIndexSlicesPools(t *testing.T) {
	slice := func(pool string, node *string, gen, count int64, devices ...string) resourceapi.ResourceSlice {
		sl := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "d", NodeName: node,
			Pool: resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: count}}}
		for _, d := range devices {
			sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: d})
		}
		return sl
	}
	s := IndexSlices([]resourceapi.ResourceSlice{
		slice("rack", nil, 2, 2, "a"),           // generation 2, 1 of 2
		slice("rack", nil, 1, 1, "x", "y", "z"), // generation 1, whole but old
		slice("shared", nil, 1, 2, "b"),
		slice("shared", nil, 1, 2, "c"),
		slice("n1", ptr.To("n1"), 1, 1, "g"),
	})
	for _, tc := range []struct {
		pool     string
		devices  int
		complete bool
	}{{"rack", 1, false}, {"shared", 2, true}, {"n1", 1, true}, {"none", 0, false}} {
		if d, c := s.Pool("d", tc.pool); d != tc.devices || c != tc.complete {
			t.Errorf("pool %s: %d devices, complete %v; want %d, %v", tc.pool, d, c, tc.devices, tc.complete)
		}
	}
}
