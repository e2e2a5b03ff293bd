package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// nodeAllocatable: the driver's devices declare what they cost the node
// (nodeAllocatableResources), and the scheduler accounts it. On a node
// whose free devices of the class all declare some, a pod given one runs,
// and its status.nodeAllocatableResourceClaimStatuses holds for its claim
// exactly what the allocated device declares: a mapping (deviceMultiplier
// for the one device, or the consumed capacity times capacityMultiplier)
// and an overhead (perPod, and perContainer for its one container). With
// that pod gone, a pod on the node asking, for its container, as much of
// one of those resources as the node has free less the device's share plus
// the least unit stays unschedulable, for want of that resource, though
// its container alone fits.
func (s *suite) nodeAllocatable(ctx context.Context, logf logFunc, k *kit) error {
	node, err := k.declaringNode(ctx)
	if err != nil {
		return err
	}
	pin := onNodes([]string{node})
	const name = "costs"
	_, r, _, err := k.oneDevice(ctx, name, pin)
	if err != nil {
		return err
	}
	dev, err := k.publishedDevice(ctx, r)
	if err != nil {
		return err
	}
	if len(dev.NodeAllocatableResources) == 0 {
		return fmt.Errorf("claim %s got %s/%s, which declares no nodeAllocatableResources, on node %s where every free device of class %s did", name, r.Pool, r.Device, node, k.m.DeviceClass)
	}
	want, err := declared(dev, r, 1)
	if err != nil {
		return err
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	got, err := accounted(pod, name)
	if err != nil {
		return err
	}
	if !sameAmounts(got, want) {
		return fmt.Errorf("pod %s's status.nodeAllocatableResourceClaimStatuses gives claim %s %s; its device %s/%s declares %s", name, name, amountsText(got), r.Pool, r.Device, amountsText(want))
	}
	logf("pod %s's status accounts %s for claim %s, as device %s/%s declares", name, amountsText(got), name, r.Pool, r.Device)
	if err := k.remove(ctx, []string{name}, []string{name}); err != nil {
		return err
	}

	// The scheduler's side: a container that fits the node alone, with a
	// device of the class, does not.
	res, share := firstAmount(want)
	free, err := k.freeOn(ctx, node, res)
	if err != nil {
		return err
	}
	ask := free.DeepCopy()
	ask.Sub(share)
	ask.Add(leastUnit(res))
	if ask.Sign() <= 0 || ask.Cmp(free) > 0 {
		return skipCheck{fmt.Sprintf("node %s has %s of %s free, and the device's %s leaves no amount a container alone would fit", node, free.String(), res, share.String())}
	}
	const over = "costs-over"
	if err := k.createClaim(ctx, over, k.request("dev")); err != nil {
		return err
	}
	if err := k.pod(ctx, over, []string{over}, func(p *v1.Pod) {
		pin(p)
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{res: ask}
	}); err != nil {
		return err
	}
	why := fmt.Sprintf("its container asks %s of %s, of the %s node %s has free, and a device of class %s adds %s", ask.String(), res, free.String(), node, k.m.DeviceClass, share.String())
	if err := k.unschedulable(ctx, over, why); err != nil {
		return err
	}
	p, err := k.client.CoreV1().Pods(k.ns).Get(ctx, over, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && !strings.Contains(c.Message, "Insufficient "+string(res)) {
			return fmt.Errorf("pod %s is unschedulable (%s), but not for want of %s: %s", over, c.Message, res, why)
		}
	}
	logf("pod %s waits: %s", over, why)
	return nil
}

// declaringNode is a node, not one whose pools skip node operations,
// where the class has free devices and each of them declares
// nodeAllocatableResources: there a claim of the class gets such a device.
func (k *kit) declaringNode(ctx context.Context) (string, error) {
	st, err := devices.Read(ctx, k.client, k.m.Driver)
	if err != nil {
		return "", err
	}
	quiet, err := k.quietNodes(ctx)
	if err != nil {
		return "", err
	}
	byNode := map[string][]device{}
	for _, d := range st.Free(k.m.Driver, "") {
		if d.Node != "" && !slices.Contains(quiet, d.Node) {
			byNode[d.Node] = append(byNode[d.Node], device{driver: d.Driver, pool: d.Pool, dev: d.Device})
		}
	}
	var some []string
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		devs, err := classDevices(ctx, k.client, k.m.DeviceClass, byNode[node])
		if err != nil {
			return "", err
		}
		declaring := 0
		for _, d := range devs {
			if len(d.dev.NodeAllocatableResources) > 0 {
				declaring++
			}
		}
		switch {
		case declaring > 0 && declaring == len(devs):
			return node, nil
		case declaring > 0:
			some = append(some, fmt.Sprintf("%s (%d of %d)", node, declaring, len(devs)))
		}
	}
	if len(some) > 0 {
		return "", skipCheck{fmt.Sprintf("no node has only free devices of class %s that declare nodeAllocatableResources, so a claim cannot be sure to get one: %s", k.m.DeviceClass, strings.Join(some, ", "))}
	}
	drops, err := dropsNodeAllocatable(ctx, k.client, k.m.Driver)
	if err != nil {
		return "", err
	}
	if drops {
		return "", skipCheck{"the cluster's API server drops a device's nodeAllocatableResources (a dry-run ResourceSlice lost them): the DRANodeAllocatableResources gate, alpha in Kubernetes 1.37, is off on this cluster"}
	}
	return "", fmt.Errorf("no free device of class %s declares nodeAllocatableResources, and the API server keeps them (a dry-run ResourceSlice with them kept them): the driver publishes none", k.m.DeviceClass)
}

// nodesDeclaringNodeAllocatable are the nodes where some device of the
// driver declares nodeAllocatableResources, sorted.
func (k *kit) nodesDeclaringNodeAllocatable(ctx context.Context) ([]string, error) {
	st, err := devices.Read(ctx, k.client, k.m.Driver)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range st.Published(k.m.Driver, "") {
		if d.Node != "" && len(d.NodeAllocatableResources) > 0 && !slices.Contains(out, d.Node) {
			out = append(out, d.Node)
		}
	}
	slices.Sort(out)
	return out, nil
}

// publishedDevice is the device of an allocation result, as its slice
// publishes it.
func (k *kit) publishedDevice(ctx context.Context, r resourceapi.DeviceRequestAllocationResult) (resourceapi.Device, error) {
	st, err := devices.Read(ctx, k.client, r.Driver)
	if err != nil {
		return resourceapi.Device{}, err
	}
	for _, d := range st.Published(r.Driver, "") {
		if d.Pool == r.Pool && d.Name == r.Device {
			return d.Device, nil
		}
	}
	return resourceapi.Device{}, fmt.Errorf("no ResourceSlice of %s publishes %s/%s", r.Driver, r.Pool, r.Device)
}

// amounts are what a claim costs a node, by resource: its mapping and its
// overhead apart, as a pod's status gives them.
type amounts struct {
	mapping, perPod, perContainer map[v1.ResourceName]resource.Quantity
}

func newAmounts() amounts {
	return amounts{mapping: map[v1.ResourceName]resource.Quantity{}, perPod: map[v1.ResourceName]resource.Quantity{}, perContainer: map[v1.ResourceName]resource.Quantity{}}
}

func addTo(m map[v1.ResourceName]resource.Quantity, name v1.ResourceName, q resource.Quantity) {
	sum := m[name]
	sum.Add(q)
	m[name] = sum
}

// declared is what device dev, allocated as r, declares it costs a pod
// with containers containers using its claim, as the API defines it: a
// mapping by device is its multiplier; a mapping by capacity is what the
// allocation consumed of the capacity key times the capacity multiplier
// (in decimal, without overflow), nothing where the allocation consumed
// none of that key, and an error (the scheduler's) where it recorded no
// consumed capacity at all; overheads per pod and per container.
func declared(dev resourceapi.Device, r resourceapi.DeviceRequestAllocationResult, containers int64) (amounts, error) {
	a := newAmounts()
	for name, nar := range dev.NodeAllocatableResources {
		if m := nar.Mapping; m != nil {
			switch {
			case m.CapacityKey != nil && *m.CapacityKey != "":
				if r.ConsumedCapacity == nil {
					return a, fmt.Errorf("device %s/%s maps %s to its capacity %s, and its allocation records no consumed capacity: the scheduler refuses such a claim", r.Pool, r.Device, name, *m.CapacityKey)
				}
				consumed, ok := r.ConsumedCapacity[*m.CapacityKey]
				if !ok {
					continue
				}
				q := consumed.DeepCopy()
				if m.CapacityMultiplier != nil {
					d := q.AsDec()
					d.Mul(d, m.CapacityMultiplier.AsDec())
					q = *resource.NewDecimalQuantity(*d, consumed.Format)
				}
				addTo(a.mapping, name, q)
			case m.DeviceMultiplier != nil:
				addTo(a.mapping, name, *m.DeviceMultiplier)
			}
		}
		if o := nar.Overhead; o != nil {
			if o.PerPod != nil {
				addTo(a.perPod, name, *o.PerPod)
			}
			if o.PerContainer != nil {
				q := o.PerContainer.DeepCopy()
				q.Mul(containers)
				addTo(a.perContainer, name, q)
			}
		}
	}
	return a, nil
}

// accounted is what a pod's status says its claim (the pod's name for it)
// costs the node.
func accounted(pod *v1.Pod, claim string) (amounts, error) {
	a := newAmounts()
	for _, s := range pod.Status.NodeAllocatableResourceClaimStatuses {
		if s.ResourceClaimName != claim {
			continue
		}
		for _, m := range s.Mapping {
			if m.Quantity != nil {
				addTo(a.mapping, m.Name, *m.Quantity)
			}
		}
		for _, o := range s.Overhead {
			if o.PerPod != nil {
				addTo(a.perPod, o.Name, *o.PerPod)
			}
			if o.PerContainer != nil {
				q := o.PerContainer.DeepCopy()
				q.Mul(int64(len(s.Containers)))
				addTo(a.perContainer, o.Name, q)
			}
		}
		return a, nil
	}
	return a, fmt.Errorf("pod %s's status.nodeAllocatableResourceClaimStatuses has no entry for claim %s (%d entries): the scheduler accounted nothing for it", pod.Name, claim, len(pod.Status.NodeAllocatableResourceClaimStatuses))
}

func sameAmounts(a, b amounts) bool {
	same := func(x, y map[v1.ResourceName]resource.Quantity) bool {
		for _, m := range []map[v1.ResourceName]resource.Quantity{x, y} {
			for name := range m {
				qx, qy := x[name], y[name]
				if qx.Cmp(qy) != 0 {
					return false
				}
			}
		}
		return true
	}
	return same(a.mapping, b.mapping) && same(a.perPod, b.perPod) && same(a.perContainer, b.perContainer)
}

func amountsText(a amounts) string {
	var parts []string
	for _, p := range []struct {
		what string
		m    map[v1.ResourceName]resource.Quantity
	}{{"mapped", a.mapping}, {"overhead per pod", a.perPod}, {"overhead per container", a.perContainer}} {
		for _, name := range slices.Sorted(maps.Keys(p.m)) {
			q := p.m[name]
			if q.Sign() != 0 {
				parts = append(parts, fmt.Sprintf("%s %s %s", p.what, q.String(), name))
			}
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// firstAmount is a resource the claim costs, in the order cpu, memory,
// then by name, with all it costs of it.
func firstAmount(a amounts) (v1.ResourceName, resource.Quantity) {
	total := map[v1.ResourceName]resource.Quantity{}
	for _, m := range []map[v1.ResourceName]resource.Quantity{a.mapping, a.perPod, a.perContainer} {
		for name, q := range m {
			addTo(total, name, q)
		}
	}
	rank := func(n v1.ResourceName) int {
		switch n {
		case v1.ResourceCPU:
			return 0
		case v1.ResourceMemory:
			return 1
		}
		return 2
	}
	names := slices.Sorted(maps.Keys(total))
	slices.SortStableFunc(names, func(x, y v1.ResourceName) int { return rank(x) - rank(y) })
	for _, n := range names {
		if q := total[n]; q.Sign() > 0 {
			return n, q
		}
	}
	return "", resource.Quantity{}
}

// leastUnit is the smallest amount of a resource a container may ask:
// a millicore of CPU, a byte of the others.
func leastUnit(name v1.ResourceName) resource.Quantity {
	if name == v1.ResourceCPU {
		return resource.MustParse("1m")
	}
	return resource.MustParse("1")
}

// freeOn is how much of a resource node has free: its allocatable less
// what its bound pods ask, their devices' share included, as the
// scheduler sums them.
func (k *kit) freeOn(ctx context.Context, node string, name v1.ResourceName) (resource.Quantity, error) {
	n, err := k.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return resource.Quantity{}, err
	}
	free := n.Status.Allocatable[name].DeepCopy()
	pods, err := k.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return resource.Quantity{}, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		q := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseDRANodeAllocatableResourceClaimStatus: true})[name]
		free.Sub(q)
	}
	return free, nil
}
