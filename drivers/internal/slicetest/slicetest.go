// Package slicetest checks a driver's pool as the API server would: for
// the tests of dralab's inventories, never linked into a driver.
package slicetest

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourcev1 "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/kit"
)

// Validate validates each slice of a driver's pool on a node with the API
// server's own validation (one invalid slice makes the whole pool
// unusable) and with the kit's check of names that Kubernetes 1.38 refuses.
func Validate(t testing.TB, driver, node string, pool []resourceslice.Slice) {
	t.Helper()
	for i, s := range pool {
		validate(t, fmt.Sprintf("slice %d of %s's %s pool", i, node, driver), resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(pool))},
			Devices: s.Devices, SharedCounters: s.SharedCounters,
			PartitionTypeAttribute: s.PartitionTypeAttribute, SkipNodeOperations: s.SkipNodeOperations,
		})
	}
}

// ValidatePool validates each slice of a pool that no one node owns (a
// network-attached pool, with a node selector, all nodes, or per-device node
// selection) as its controller publishes it.
func ValidatePool(t testing.TB, driver, name string, pool resourceslice.Pool) {
	t.Helper()
	for i, s := range pool.Slices {
		spec := resourceapi.ResourceSliceSpec{
			Driver:       driver,
			Pool:         resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
			NodeSelector: pool.NodeSelector, PerDeviceNodeSelection: s.PerDeviceNodeSelection,
			Devices: s.Devices, SharedCounters: s.SharedCounters,
			PartitionTypeAttribute: s.PartitionTypeAttribute, SkipNodeOperations: s.SkipNodeOperations,
		}
		if pool.AllNodes {
			spec.AllNodes = ptr.To(true)
		}
		validate(t, fmt.Sprintf("slice %d of %s's pool %s", i, driver, name), spec)
	}
}

func validate(t testing.TB, what string, spec resourceapi.ResourceSliceSpec) {
	t.Helper()
	if err := kit.CheckNames(spec.Driver, spec.Devices); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	v1 := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "slice"}, Spec: spec}
	var internal resourceinternal.ResourceSlice
	if err := resourcev1.Convert_v1_ResourceSlice_To_resource_ResourceSlice(v1, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceSlice(&internal); len(errs) > 0 {
		t.Errorf("%s is invalid: %v", what, errs.ToAggregate())
	}
}
