package cluster

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The node-allocatable check tells a driver that publishes no
// nodeAllocatableResources from an API server that drops them: a dry-run
// slice that comes back without them is the cluster's gate, and the check
// is not verified rather than failed; one that keeps them, or a dry run
// the suite may not make, leaves the verdict to the driver.
func TestDropsNodeAllocatable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*resourceapi.ResourceSlice) (runtime.Object, error)
		want   bool
	}{
		{"gate off", func(s *resourceapi.ResourceSlice) (runtime.Object, error) {
			s.Spec.Devices[0].NodeAllocatableResources = nil
			return s, nil
		}, true},
		{"gate on", func(s *resourceapi.ResourceSlice) (runtime.Object, error) { return s, nil }, false},
		{"forbidden", func(*resourceapi.ResourceSlice) (runtime.Object, error) {
			return nil, apierrors.NewForbidden(resourceapi.Resource("resourceslices"), "", nil)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			dryRun := false
			client.PrependReactor("create", "resourceslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
				c := a.(clienttesting.CreateActionImpl)
				dryRun = len(c.CreateOptions.DryRun) == 1
				obj, err := tc.answer(c.GetObject().(*resourceapi.ResourceSlice).DeepCopy())
				return true, obj, err
			})
			got, err := dropsNodeAllocatable(context.Background(), client, "gpu.example.com")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || !dryRun {
				t.Errorf("dropsNodeAllocatable = %v (dry run: %v); want %v, by a dry run", got, dryRun, tc.want)
			}
		})
	}
}
