package allocation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

// NodeResources: the pod's devices fit, but not the node's memory or CPUs
// once the devices' node-allocatable resources (a GPU's host memory per
// pod, a CPU driver's cores) are added to what the pod's containers ask.
const NodeResources = "NodeResources"

// NotRetried: the scheduler refused the pod for the node's memory or CPUs,
// and now a node has room for it with its devices: the refusal is older
// than a pod that left, which the scheduler does not try the pod again
// for (its DynamicResources plugin waits for a claim, slice, class or node
// to change, else for its periodic retry of unschedulable pods).
const NotRetried = "NotRetried"

// accounted are the node resources the scheduler accounts through devices
// (Kubernetes 1.37's DRANodeAllocatableResources), in the words a reader
// knows them by.
var accounted = []struct {
	name  v1.ResourceName
	words string // a quantity in words: %s of host memory, %s CPUs
}{{v1.ResourceMemory, "%s of host memory"}, {v1.ResourceCPU, "%s CPUs"}}

// DRAResources is what the scheduler accounted for a bound pod through its
// claims' devices (status.nodeAllocatableResourceClaimStatuses): mapped
// resources and overheads, per resource.
func DRAResources(pod *v1.Pod) v1.ResourceList {
	with := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{UseDRANodeAllocatableResourceClaimStatus: true})
	without := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	out := v1.ResourceList{}
	for name, q := range with {
		q.Sub(without[name])
		if q.Sign() != 0 {
			out[name] = q
		}
	}
	return out
}

// whyNodeResources explains a pod the scheduler found short of memory or
// CPUs on every node whose devices its claims match, where those devices
// add node resources: per node, what is allocatable, what bound pods hold
// (their devices' part included) and what this pod would need.
func (s *Snapshot) whyNodeResources(ctx context.Context, pod *v1.Pod, message string, holders map[string]string) (string, string, error) {
	short := func(r v1.ResourceName) bool { return strings.Contains(message, "Insufficient "+string(r)) }
	if !short(v1.ResourceMemory) && !short(v1.ResourceCPU) {
		return "", "", nil
	}
	// Per node, what the pod's unallocated requests would add at least
	// (the free device that adds least, per request), and through which
	// device.
	add := map[string]v1.ResourceList{}
	via := map[string]map[v1.ResourceName][]string{}
	for _, ref := range podClaims(pod) {
		claim := s.Claims[claimKey(pod.Namespace, ref.name)]
		if claim == nil || claim.Status.Allocation != nil {
			continue
		}
		for _, req := range claim.Spec.Devices.Requests {
			least := map[string]deviceRef{}
			for _, alt := range alternatives(req) {
				devs, err := s.matching(ctx, alt)
				if err != nil {
					return "", "", err
				}
				for _, d := range devs {
					if _, held := holders[d.driver+"/"+d.String()]; held && !ptr.Deref(d.dev.AllowMultipleAllocations, false) {
						continue
					}
					node := s.poolNode(d.driver, d.pool)
					if node == "" {
						continue
					}
					if cur, ok := least[node]; !ok || lessAdded(d.dev, cur.dev) {
						least[node] = d
					}
				}
			}
			for node, d := range least {
				n := int64(1)
				if req.Exactly != nil && req.Exactly.Count > 0 {
					n = req.Exactly.Count
				}
				for _, a := range accounted {
					if q, ok := devicePerPod(d.dev, a.name, containerRefs(pod, ref.podName), consumedOf(d.dev, req)); ok {
						q.Mul(n)
						if add[node] == nil {
							add[node], via[node] = v1.ResourceList{}, map[v1.ResourceName][]string{}
						}
						sum := add[node][a.name]
						sum.Add(q)
						add[node][a.name] = sum
						via[node][a.name] = append(via[node][a.name], fmt.Sprintf(a.words+" for %s (request %s)", q.String(), d, req.Name))
					}
				}
			}
		}
	}
	own := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	var why, room []string
	for _, node := range slices.Sorted(maps.Keys(add)) {
		n := s.Nodes[node]
		if n == nil {
			continue
		}
		held, heldDRA, err := s.nodeHeld(ctx, node, len(add))
		if err != nil {
			return "", "", err
		}
		for _, a := range accounted {
			extra, ok := add[node][a.name]
			if !ok || !short(a.name) {
				continue
			}
			alloc := n.Status.Allocatable[a.name]
			need := own[a.name].DeepCopy()
			need.Add(extra)
			free := alloc.DeepCopy()
			free.Sub(held[a.name])
			if need.Cmp(free) <= 0 {
				room = append(room, fmt.Sprintf("node %s has "+a.words+" free, this pod needs %s with its devices", node, free.String(), need.String()))
				continue
			}
			ownQ, over := own[a.name], minus(need, free)
			heldQ, heldDRAQ := held[a.name], heldDRA[a.name]
			why = append(why, fmt.Sprintf("node %s has "+a.words+" allocatable and its pods hold %s (%s of it through their devices); this pod asks %s for its containers and, through its devices' nodeAllocatableResources, %s: %s, %s more than is free",
				node, alloc.String(), heldQ.String(), heldDRAQ.String(), ownQ.String(), strings.Join(via[node][a.name], ", "), need.String(), over.String()))
		}
	}
	if len(why) == 0 && len(room) > 0 {
		// The scheduler's DynamicResources plugin retries a pod it refused
		// when a claim, slice, class or node changes, not when a pod
		// leaves a node: until then, or the scheduler's periodic retry of
		// unschedulable pods, the pod waits with a stale message.
		return NotRetried, message + " (stale: " + strings.Join(room, "; ") + "; the scheduler retries a pod its DynamicResources plugin refused when a claim, ResourceSlice, DeviceClass or node changes, not when a pod leaves the node, else within 5 minutes)", nil
	}
	if len(why) == 0 {
		return "", "", nil
	}
	return NodeResources, "its devices fit, but not the node's resources with what the devices add: " + strings.Join(why, "; "), nil
}

// nodeHeld sums the requests of the pods bound to a node that have not
// ended, and the part of them accounted through their devices. Where the
// snapshot lists bound pods as it needs them, it lists the node's, or
// the cluster's every bound pod once where nodes, the nodes in question,
// are more than a few.
func (s *Snapshot) nodeHeld(ctx context.Context, node string, nodes int) (v1.ResourceList, v1.ResourceList, error) {
	bound := s.Bound
	if s.boundOn != nil {
		const fewNodes = 16
		all := nodes > fewNodes
		which := node
		if all {
			which = ""
		}
		read, err := s.boundOn(ctx, which)
		if err != nil {
			return nil, nil, err
		}
		bound = read
		if all {
			// Every bound pod read: the snapshot keeps them.
			s.Bound, s.boundOn = read, nil
		}
	}
	held, dra := v1.ResourceList{}, v1.ResourceList{}
	for i := range bound {
		p := &bound[i]
		if p.Spec.NodeName != node || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseDRANodeAllocatableResourceClaimStatus: true}) {
			sum := held[name]
			sum.Add(q)
			held[name] = sum
		}
		for name, q := range DRAResources(p) {
			sum := dra[name]
			sum.Add(q)
			dra[name] = sum
		}
	}
	return held, dra, nil
}

// devicePerPod is what one pod's claim for a device adds of a node
// resource, as the API documents it: its overhead per pod, plus its
// overhead per container for each of the pod's refs containers that
// reference the claim; and its mapping, per device or, with a capacity
// key, the capacity the claim consumes of the device (consumed) times
// its multiplier. False if it adds none.
func devicePerPod(d *resourceapi.Device, name v1.ResourceName, refs int64, consumed func(resourceapi.QualifiedName) resource.Quantity) (resource.Quantity, bool) {
	r, ok := d.NodeAllocatableResources[name]
	if !ok {
		return resource.Quantity{}, false
	}
	var q resource.Quantity
	if o := r.Overhead; o != nil {
		if o.PerPod != nil {
			q.Add(*o.PerPod)
		}
		if o.PerContainer != nil {
			per := o.PerContainer.DeepCopy()
			per.Mul(refs)
			q.Add(per)
		}
	}
	if m := r.Mapping; m != nil {
		switch {
		case m.DeviceMultiplier != nil:
			q.Add(*m.DeviceMultiplier)
		case m.CapacityKey != nil && m.CapacityMultiplier != nil:
			c, mult := consumed(*m.CapacityKey), m.CapacityMultiplier.DeepCopy()
			product := c.AsDec()
			product.Mul(product, mult.AsDec())
			q.Add(*resource.NewDecimalQuantity(*product, c.Format))
		}
	}
	return q, q.Sign() > 0
}

// consumedOf is what a request would consume of a device's capacity, as
// the allocator takes it: what the request asks, else the capacity's
// request policy default, else all of it.
func consumedOf(d *resourceapi.Device, req resourceapi.DeviceRequest) func(resourceapi.QualifiedName) resource.Quantity {
	return func(key resourceapi.QualifiedName) resource.Quantity {
		if req.Exactly != nil && req.Exactly.Capacity != nil {
			if q, ok := req.Exactly.Capacity.Requests[key]; ok {
				return q
			}
		}
		c := d.Capacity[key]
		if p := c.RequestPolicy; p != nil && p.Default != nil {
			return *p.Default
		}
		return c.Value
	}
}

// containerRefs counts the containers of a pod that reference its claim
// entry named claim.
func containerRefs(pod *v1.Pod, claim string) int64 {
	var n int64
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, r := range c.Resources.Claims {
				if r.Name == claim {
					n++
				}
			}
		}
	}
	return n
}

// lessAdded orders devices by the memory they add, then the CPUs.
func lessAdded(a, b *resourceapi.Device) bool {
	for _, r := range accounted {
		qa, _ := devicePerPod(a, r.name, 1, consumedOf(a, resourceapi.DeviceRequest{}))
		qb, _ := devicePerPod(b, r.name, 1, consumedOf(b, resourceapi.DeviceRequest{}))
		if c := qa.Cmp(qb); c != 0 {
			return c < 0
		}
	}
	return false
}

// poolNode is the node of a driver's pool, "" for a pool not bound to one.
func (s *Snapshot) poolNode(driver, pool string) string {
	for i := range s.Slices {
		sl := &s.Slices[i]
		if sl.Spec.Driver == driver && sl.Spec.Pool.Name == pool && sl.Spec.NodeName != nil {
			return *sl.Spec.NodeName
		}
	}
	return ""
}

func minus(a, b resource.Quantity) resource.Quantity {
	out := a.DeepCopy()
	out.Sub(b)
	return out
}
