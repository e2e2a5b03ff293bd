package cluster

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The podresources check passes only when the node's kubelet lists the
// pod's container with exactly its claim's device, each CDI ID a qualified
// name, and lists the pod no more once it is gone: another device, a
// second one, a malformed CDI ID, a pod never listed or never dropped
// fail it; without a way to read the node it is not verified.
func TestPodResourcesMustListTheAllocatedDevice(t *testing.T) {
	type listing func(pod *v1.Pod, claim *resourceapi.ResourceClaim) []*podresourcesapi.ClaimResource
	exact := func(_ *v1.Pod, c *resourceapi.ResourceClaim) []*podresourcesapi.ClaimResource {
		r := c.Status.Allocation.Devices.Results[0]
		return []*podresourcesapi.ClaimResource{{DriverName: r.Driver, PoolName: r.Pool, DeviceName: r.Device, CdiDevices: []*podresourcesapi.CDIDevice{{Name: "gpu.example.com/gpu=" + c.Name + "-" + r.Device}}}}
	}
	for _, c := range []struct {
		name    string
		list    listing
		linger  bool
		noNode  bool
		want    string
		skipped bool
	}{
		{name: "listed", list: exact},
		{name: "another device", list: func(p *v1.Pod, cl *resourceapi.ResourceClaim) []*podresourcesapi.ClaimResource {
			out := exact(p, cl)
			out[0].DeviceName = "gpu-9"
			return out
		}, want: "/gpu-9]; its claim was allocated"},
		{name: "two devices", list: func(p *v1.Pod, cl *resourceapi.ResourceClaim) []*podresourcesapi.ClaimResource {
			out := exact(p, cl)
			return append(out, out[0])
		}, want: "want exactly"},
		{name: "malformed CDI ID", list: func(p *v1.Pod, cl *resourceapi.ResourceClaim) []*podresourcesapi.ClaimResource {
			out := exact(p, cl)
			out[0].CdiDevices[0].Name = "gpu-0"
			return out
		}, want: `CDI device "gpu-0"`},
		{name: "never listed", list: func(*v1.Pod, *resourceapi.ResourceClaim) []*podresourcesapi.ClaimResource { return nil }, want: "to list pod listed's device"},
		{name: "never dropped", list: exact, linger: true, want: "to list pod listed no more"},
		{name: "no access to the node", noNode: true, skipped: true, want: "needs access to the node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, k := newFakeCluster(t, refuseWithEvent)
			k.m.Timeouts.PodRunning = time.Second
			var seen *podresourcesapi.PodResources
			if !c.noNode {
				// The kubelet: every bound pod of the fake, its claims
				// listed as c.list says; a deleted one kept with linger.
				k.o.PodResources = func(ctx context.Context, node string) (*podresourcesapi.ListPodResourcesResponse, error) {
					resp := &podresourcesapi.ListPodResourcesResponse{}
					pods, err := f.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
					if err != nil {
						return nil, err
					}
					for i := range pods.Items {
						p := &pods.Items[i]
						if p.Spec.NodeName != node {
							continue
						}
						cr := &podresourcesapi.ContainerResources{Name: p.Spec.Containers[0].Name}
						for _, pc := range p.Spec.ResourceClaims {
							claim, err := f.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
							if err != nil || claim.Status.Allocation == nil {
								continue
							}
							cr.DynamicResources = append(cr.DynamicResources, &podresourcesapi.DynamicResource{ClaimName: claim.Name, ClaimNamespace: claim.Namespace, ClaimResources: c.list(p, claim)})
						}
						seen = &podresourcesapi.PodResources{Name: p.Name, Namespace: p.Namespace, Containers: []*podresourcesapi.ContainerResources{cr}}
						resp.PodResources = append(resp.PodResources, seen)
					}
					if c.linger && len(resp.PodResources) == 0 && seen != nil {
						resp.PodResources = append(resp.PodResources, seen)
					}
					return resp, nil
				}
			}
			expectVerdict(t, k.podResources(context.Background(), t.Logf, k), c.want, c.skipped)
		})
	}
}
