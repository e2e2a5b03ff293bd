package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// BenchmarkBuildAndRender is what the live dashboard does on every burst
// of changes during a 100-pod wave: build the page of 100 pods whose
// claims ask for an H100, else an A100, else an L4, 6 holding the
// cluster's 6 GPUs and 94 pending (each with its reason), and render the
// view.
func BenchmarkBuildAndRender(b *testing.B) {
	ctx := context.Background()
	var slices []resourceapi.ResourceSlice
	var devices []string
	for _, n := range []struct{ node, product string }{{"gpu-h100", "NVIDIA H100 80GB HBM3"}, {"gpu-l4", "NVIDIA L4"}} {
		s := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n.node}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(n.node), Pool: resourceapi.ResourcePool{Name: n.node, ResourceSliceCount: 1}}}
		for i := range 3 {
			s.Spec.Devices = append(s.Spec.Devices, gpuDevice(fmt.Sprintf("gpu-%d", i), n.product))
			devices = append(devices, n.node+"/"+fmt.Sprintf("gpu-%d", i))
		}
		slices = append(slices, s)
	}
	var subs []resourceapi.DeviceSubRequest
	for _, t := range gpu.Tiers {
		subs = append(subs, resourceapi.DeviceSubRequest{Name: t.Name, DeviceClassName: t.ClassName()})
	}
	var pods []v1.Pod
	var claims []resourceapi.ResourceClaim
	for i := range 100 {
		name := fmt.Sprintf("worker-%d", i)
		c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name + "-gpu"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: subs}}}}}
		p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name}, Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.Name)}}}}
		if i < len(devices) {
			node, dev, _ := strings.Cut(devices[i], "/")
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu/" + map[string]string{"gpu-h100": "h100", "gpu-l4": "l4"}[node], Driver: driver, Pool: node, Device: dev}}}}
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name}}
			p.Spec.NodeName, p.Status.Phase = node, v1.PodRunning
		} else {
			p.Status.Phase = v1.PodPending
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "0/2 nodes are available: cannot allocate all claims."}}
		}
		pods, claims = append(pods, p), append(claims, c)
	}
	snap := allocation.NewSnapshot(nodedrivers.Vocabulary, metav1.NamespaceAll, pods, claims, slices, gpu.DeviceClasses(), nil, nil)
	for b.Loop() {
		p, err := dashboard.Build(ctx, "bench", snap)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Pending) != 94 {
			b.Fatalf("%d pending pods, want 94", len(p.Pending))
		}
		if _, err := dashboard.RenderView(p); err != nil {
			b.Fatal(err)
		}
	}
}
