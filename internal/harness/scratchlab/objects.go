package scratchlab

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
)

// ClaimTemplate is a template of one request "gpu" of a class, with an
// optional CEL selector and an optional memory request (for a shared
// device).
func ClaimTemplate(namespace, name, class, selector, memory string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	if memory != "" {
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{gpu.CapacityMemory: resource.MustParse(memory)}}
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}},
	}
}

// ClaimPod is a pod whose one container uses one claim from a template
// and prints its environment.
func ClaimPod(namespace, name, template string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{
				Name: "ctr", Image: "registry.k8s.io/pause:3.10",
				// It prints its environment, then waits to be stopped: the
				// lab's pause image is busybox's (a hollow node's runtime
				// prints the environment whatever the command).
				Command:   []string{"/bin/sh", "-c", "/bin/busybox env; trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
			}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
		},
	}
}
