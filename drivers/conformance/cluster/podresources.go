package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// podResources: a pod given one device of the class runs, and its node's
// kubelet lists, on its podresources API (what monitoring agents read to
// map devices to pods), the pod's container with exactly its claim and the
// allocated device, each CDI device ID a qualified CDI name; once the pod
// and its claim are gone, the kubelet lists them no more. Reading a node's
// podresources socket needs the node: Options.PodResources, which the
// embedded lab gives; elsewhere the check is not verified.
func (s *suite) podResources(ctx context.Context, logf logFunc, k *kit) error {
	if k.o.PodResources == nil {
		return skipCheck{"reading a node's podresources socket needs access to the node: run the suite on dralab's embedded lab (conformance:run), or give cluster.Options.PodResources"}
	}
	const name = "listed"
	_, r, node, err := k.oneDevice(ctx, name, onNodes(k.o.PodResourcesNodes))
	if err != nil {
		return err
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var listed []string
	var cdi []string
	err = poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("node %s's kubelet to list pod %s's device on its podresources API", node, name), func(ctx context.Context) (string, bool, error) {
		resp, err := k.o.PodResources(ctx, node)
		if err != nil {
			return "", false, settle(fmt.Errorf("reading node %s's podresources: %w", node, err))
		}
		c := containerOf(resp, k.ns, name, pod.Spec.Containers[0].Name)
		if c == nil {
			return fmt.Sprintf("the kubelet lists no container %s of pod %s/%s", pod.Spec.Containers[0].Name, k.ns, name), false, nil
		}
		listed, cdi = nil, nil
		for _, dr := range c.GetDynamicResources() {
			for _, cr := range dr.GetClaimResources() {
				listed = append(listed, fmt.Sprintf("claim %s/%s: %s/%s/%s", dr.GetClaimNamespace(), dr.GetClaimName(), cr.GetDriverName(), cr.GetPoolName(), cr.GetDeviceName()))
				for _, id := range cr.GetCdiDevices() {
					cdi = append(cdi, id.GetName())
				}
			}
		}
		return fmt.Sprintf("container %s lists %v", c.GetName(), listed), len(listed) > 0, nil
	})
	if err != nil {
		return err
	}
	want := fmt.Sprintf("claim %s/%s: %s/%s/%s", k.ns, name, r.Driver, r.Pool, r.Device)
	if !slices.Equal(listed, []string{want}) {
		return fmt.Errorf("node %s's kubelet lists pod %s's container with %v; its claim was allocated %s/%s/%s, want exactly [%s]", node, name, listed, r.Driver, r.Pool, r.Device, want)
	}
	for _, id := range cdi {
		if _, _, _, err := parser.ParseQualifiedName(id); err != nil {
			return fmt.Errorf("node %s's kubelet lists CDI device %q for %s/%s, which is no qualified CDI name: %w", node, id, r.Pool, r.Device, err)
		}
	}
	logf("node %s's kubelet lists pod %s's container with %s, CDI devices %s", node, name, want, strings.Join(cdi, ", "))
	if err := k.remove(ctx, []string{name}, []string{name}); err != nil {
		return err
	}
	return poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("node %s's kubelet to list pod %s no more", node, name), func(ctx context.Context) (string, bool, error) {
		resp, err := k.o.PodResources(ctx, node)
		if err != nil {
			return "", false, settle(fmt.Errorf("reading node %s's podresources: %w", node, err))
		}
		for _, p := range resp.GetPodResources() {
			if p.GetNamespace() == k.ns && p.GetName() == name {
				return fmt.Sprintf("the kubelet still lists pod %s/%s", k.ns, name), false, nil
			}
		}
		return "", true, nil
	})
}

// containerOf finds a pod's container in a podresources List response.
func containerOf(resp *podresourcesapi.ListPodResourcesResponse, namespace, pod, container string) *podresourcesapi.ContainerResources {
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != namespace || p.GetName() != pod {
			continue
		}
		for _, c := range p.GetContainers() {
			if c.GetName() == container {
				return c
			}
		}
	}
	return nil
}
