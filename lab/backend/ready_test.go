package backend

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/lab/config"
)

// A node whose pool is published in several slices is ready only once all
// of them are: an NVML node in MIG mode publishes its counter sets and
// MIG devices one slice at a time, and a test that lists the slices as
// soon as the lab is up must see them all.
func TestNodeWaitsForItsWholePool(t *testing.T) {
	cfg := &config.Config{Nodes: []config.Node{{Name: "dgx", GPUs: &config.GPUs{NVML: "mock:dgxa100-mig", Mode: config.GPUModeDRA}}}}
	node := v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	slice := func(gen int64, devices int) resourceapi.ResourceSlice {
		s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: gpu.DriverName, NodeName: ptr.To("dgx"),
			Pool: resourceapi.ResourcePool{Name: "dgx", Generation: gen, ResourceSliceCount: 3},
		}}
		for range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{})
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		slices []resourceapi.ResourceSlice
		ready  bool
	}{
		{"one of three", []resourceapi.ResourceSlice{slice(1, 0)}, false},
		{"two of three", []resourceapi.ResourceSlice{slice(1, 0), slice(1, 52)}, false},
		{"three of three", []resourceapi.ResourceSlice{slice(1, 0), slice(1, 52), slice(1, 52)}, true},
		{"an older generation does not count", []resourceapi.ResourceSlice{slice(1, 52), slice(1, 52), slice(2, 0)}, false},
	} {
		missing := nodesNotReady(cfg, []v1.Node{node}, tc.slices, SameName)
		if ready := len(missing) == 0; ready != tc.ready {
			t.Errorf("%s: ready %v (%v), want %v", tc.name, ready, missing, tc.ready)
		}
		if why := missing["dgx"].why; !tc.ready && why != "" && !strings.Contains(why, "only some") && !strings.Contains(why, "no GPUs") {
			t.Errorf("%s: %q", tc.name, why)
		}
	}
}
