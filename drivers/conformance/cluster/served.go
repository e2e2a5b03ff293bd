package cluster

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// What the cluster serves and enforces is read before the driver is
// judged: a capability the cluster switched off cannot be verified, and
// the suite says which part of the cluster lacks it rather than failing
// the driver.

// servesDeviceTaintRules tells whether the API server serves
// DeviceTaintRules in resource.k8s.io/v1, the version the suite speaks.
// Kubernetes 1.37 serves them by default; 1.36 only as v1beta2, which is
// off by default.
func servesDeviceTaintRules(client kubernetes.Interface) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the API server what %s serves: %w", resourceapi.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "devicetaintrules" }), nil
}

// dropsNodeAllocatable asks the API server, with a dry run, whether it
// keeps a device's nodeAllocatableResources: an API server without the
// DRANodeAllocatableResources gate drops the field. It answers false, with
// no error, where the dry run is not allowed: the check then judges the
// driver as before.
func dropsNodeAllocatable(ctx context.Context, client kubernetes.Interface, driver string) (bool, error) {
	probe := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-probe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: "conformance-probe", ResourceSliceCount: 1},
			AllNodes: ptr.To(true),
			Devices: []resourceapi.Device{{
				Name: "probe",
				NodeAllocatableResources: map[v1.ResourceName]resourceapi.NodeAllocatableResource{
					v1.ResourceMemory: {Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: ptr.To(resource.MustParse("1Gi"))}},
				},
			}},
		},
	}
	got, err := client.ResourceV1().ResourceSlices().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the API server, with a dry run, whether it keeps a device's nodeAllocatableResources: %w", err)
	}
	return len(got.Spec.Devices) == 1 && len(got.Spec.Devices[0].NodeAllocatableResources) == 0, nil
}
