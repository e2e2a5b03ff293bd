package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func (s *suite) singleDevice(ctx context.Context, logf logFunc, k *kit) error {
	v, got, _, err := k.oneDevice(ctx, "one", nil)
	if err != nil {
		return err
	}
	logf("pod one got %s/%s and proves %q", got.Pool, got.Device, v)
	return nil
}

func (s *suite) sharedClaim(ctx context.Context, logf logFunc, k *kit) error {
	if err := k.createClaim(ctx, "shared", k.request("dev")); err != nil {
		return err
	}
	var proofs []string
	for _, name := range []string{"first", "second"} {
		if err := k.pod(ctx, name, []string{"shared"}, nil); err != nil {
			return err
		}
		v, err := k.proof(ctx, name)
		if err != nil {
			return err
		}
		proofs = append(proofs, v)
	}
	if proofs[0] != proofs[1] {
		return fmt.Errorf("two pods sharing one claim prove different devices: %q and %q", proofs[0], proofs[1])
	}
	claim, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n := len(claim.Status.ReservedFor); n != 2 {
		return fmt.Errorf("the shared claim is reserved for %d pods, want 2", n)
	}
	logf("both pods prove %q", proofs[0])
	return nil
}

// prioritizedList asks for the manifest's classes in order: the result must
// be the first class that still has a free device.
func (s *suite) prioritizedList(ctx context.Context, logf logFunc, k *kit) error {
	free, err := freeDevices(ctx, k.client, s.m.Driver)
	if err != nil {
		return err
	}
	want := -1
	var subrequests []resourceapi.DeviceSubRequest
	for i, class := range s.m.PrioritizedClasses {
		subrequests = append(subrequests, resourceapi.DeviceSubRequest{Name: fmt.Sprintf("c%d", i), DeviceClassName: class})
		if want >= 0 {
			continue
		}
		n, err := matching(ctx, k.client, class, free)
		if err != nil {
			return fmt.Errorf("the manifest's prioritizedClasses: %w", err)
		}
		if n > 0 {
			want = i
		}
	}
	if want < 0 {
		return skipCheck{fmt.Sprintf("no free device matches any of the classes %v: the check needs one", s.m.PrioritizedClasses)}
	}
	if err := k.createClaim(ctx, "prio", resourceapi.DeviceRequest{Name: "dev", FirstAvailable: subrequests}); err != nil {
		return err
	}
	if err := k.pod(ctx, "prio", []string{"prio"}, nil); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "prio"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "prio")
	if err != nil {
		return err
	}
	wantRequest := fmt.Sprintf("dev/c%d", want)
	if len(results) != 1 || results[0].Request != wantRequest {
		return fmt.Errorf("the claim got %v, want request %s (class %s, the first with a free device)", results, wantRequest, s.m.PrioritizedClasses[want])
	}
	logf("prioritized list chose %s (%s): %s/%s", wantRequest, s.m.PrioritizedClasses[want], results[0].Pool, results[0].Device)
	return nil
}

// adminAccess: a claim with admin access gets every device of a node, the
// one a workload uses included, and the workload keeps running. The
// workload runs on a node whose devices of the class are plain where the
// driver has one: on the conformance lab, an admin claim for every device
// of the MIG node, and one of the shared node, beside a workload there
// stayed unschedulable ("cannot allocate all claims"), the allocator
// apparently counting the admin claim's counters or capacity, which the
// workload holds already.
//
// Where no node has plain devices and the manifest gives shares (a NIC
// driver, every device shared by bandwidth), both claims ask for a share:
// Kubernetes 1.37.2's allocator checks an admin request's capacity like
// any other's, so an admin claim for a device a workload holds whole
// waits, and one for a share beside the workload's gets it.
func (s *suite) adminAccess(ctx context.Context, logf logFunc, k *kit) error {
	plain, err := k.plainNodes(ctx)
	if err != nil {
		return err
	}
	var share *resourceapi.CapacityRequirements
	if len(plain) == 0 && s.m.Shares != nil {
		share = &resourceapi.CapacityRequirements{Requests: maps.Clone(s.m.Shares.Request)}
	}
	work := k.request("dev")
	work.Exactly.Capacity = share
	_, used, node, err := k.oneDeviceOf(ctx, "work", work, onNodes(plain))
	if err != nil {
		return err
	}
	req, err := k.everyDeviceWith(ctx, "all", node, used)
	if err != nil {
		return err
	}
	req.Exactly.AdminAccess = ptr.To(true)
	req.Exactly.Capacity = share
	if err := k.createClaim(ctx, "admin", req); err != nil {
		return err
	}
	if err := k.pod(ctx, "admin", []string{"admin"}, onNodes([]string{node})); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "admin"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "admin")
	if err != nil {
		return err
	}
	found := slices.ContainsFunc(results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Pool == used.Pool && r.Device == used.Device && r.AdminAccess != nil && *r.AdminAccess
	})
	if !found {
		return fmt.Errorf("the admin claim got %v, want the in-use device %s/%s among them with admin access", results, used.Pool, used.Device)
	}
	if _, err := k.proof(ctx, "work"); err != nil {
		return fmt.Errorf("the workload after the admin pod started: %w", err)
	}
	logf("admin claim holds %d devices of node %s%s, %s/%s in use by the workload among them", len(results), node, selectorNote(req), used.Pool, used.Device)
	return nil
}

// deviceTaints: a device tainted NoSchedule is not allocated, and is once
// the taint is gone. The check taints only a device it was allocated
// itself, named by driver, pool and device: a claim of the class gets it,
// the rule taints it, the claim goes. A claim for every device of the
// class on that node (CEL cannot name a device) must then stay
// unallocated, and be allocated, that device among its results, once the
// rule is deleted: the rule, on that one device, is what changed.
func (s *suite) deviceTaints(ctx context.Context, logf logFunc, k *kit) error {
	served, err := servesDeviceTaintRules(k.client)
	if err != nil {
		return err
	}
	if !served {
		return skipCheck{"the cluster does not serve DeviceTaintRules in resource.k8s.io/v1 (Kubernetes 1.37 does by default; 1.36 serves them only as v1beta2, off by default): the check taints a device with one"}
	}
	_, own, node, err := k.oneDevice(ctx, "probe", nil)
	if err != nil {
		return err
	}
	// Before the rule: a node whose devices a claim cannot all hold may
	// make the check skip.
	every, err := k.everyDeviceWith(ctx, "every", node, own)
	if err != nil {
		return err
	}
	rule := k.taintRule(own)
	if _, err := k.client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("DeviceTaintRule %s: %w", rule.Name, err)
	}
	k.rules = append(k.rules, rule.Name)
	device := own.Driver + "/" + own.Pool + "/" + own.Device
	logf("tainted %s on node %s, the device claim probe got", device, node)
	if err := k.remove(ctx, []string{"probe"}, []string{"probe"}); err != nil {
		return fmt.Errorf("freeing %s: %w", device, err)
	}

	if err := k.createClaim(ctx, "every", every); err != nil {
		return err
	}
	if err := k.pod(ctx, "every", []string{"every"}, onNodes([]string{node})); err != nil {
		return err
	}
	if err := k.unschedulable(ctx, "every", fmt.Sprintf("a claim for every device of node %s while %s is tainted NoSchedule", node, device)); err != nil {
		// Which devices a rule taints is the cluster's to apply: a driver
		// publishes the device, the scheduler reads the rule. A claim
		// given the device the rule names is the cluster's doing.
		if c, gerr := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, "every", metav1.GetOptions{}); gerr == nil && c.Status.Allocation != nil &&
			slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
				return r.Driver == own.Driver && r.Pool == own.Pool && r.Device == own.Device
			}) {
			return skipCheck{fmt.Sprintf("the cluster does not enforce DeviceTaintRules: its scheduler gave claim every %s, which DeviceTaintRule %s taints NoSchedule by driver, pool and device name (is the DRADeviceTaintRules gate off?)", device, rule.Name)}
		}
		return err
	}
	if err := deleteEach(ctx, "DeviceTaintRule", []string{rule.Name}, k.client.ResourceV1().DeviceTaintRules().Delete); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "every"); err != nil {
		return fmt.Errorf("after the taint on %s was removed: %w", device, err)
	}
	got, err := k.claimResults(ctx, "every")
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(got, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == own.Driver && r.Pool == own.Pool && r.Device == own.Device
	}) {
		return fmt.Errorf("after the taint was removed, the claim for every device of node %s got %v, without %s", node, got, device)
	}
	logf("while %s was tainted, a claim for all %d devices of node %s%s stayed unallocated; untainted, it got them", device, len(got), node, selectorNote(every))
	return nil
}

// selectorNote says, for a message, which devices of a node a request for
// all of them narrows to.
func selectorNote(req resourceapi.DeviceRequest) string {
	if req.Exactly == nil || len(req.Exactly.Selectors) == 0 {
		return ""
	}
	return fmt.Sprintf(" with %s (a claim may hold %d)", req.Exactly.Selectors[0].CEL.Expression, claimLimit)
}

// taintRule taints exactly one device: its selector names the device's
// driver, pool and name.
func (k *kit) taintRule(d resourceapi.DeviceRequestAllocationResult) *resourceapi.DeviceTaintRule {
	return &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: k.ns, Labels: k.labels()},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(d.Driver), Pool: ptr.To(d.Pool), Device: ptr.To(d.Device)},
			Taint:          resourceapi.DeviceTaint{Key: TaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}
}

// extendedResource: a pod asking for the class's extended resource gets a
// device through a claim the scheduler makes for it. The pod keeps off the
// nodes whose devices declare nodeAllocatableResources: Kubernetes 1.37's
// scheduler records such a device's share under a claim name its API
// server refuses, and the pod is never bound (kubernetes/kubernetes#141467,
// fixed for 1.38 by #141556).
func (s *suite) extendedResource(ctx context.Context, logf logFunc, k *kit) error {
	name := v1.ResourceName(s.m.ExtendedResource())
	costly, err := k.nodesDeclaringNodeAllocatable(ctx)
	if err != nil {
		return err
	}
	quiet, err := k.quietNodes(ctx)
	if err != nil {
		return err
	}
	if len(costly) > 0 {
		logf("the pod keeps off nodes %s, whose devices declare nodeAllocatableResources (kubernetes/kubernetes#141467)", strings.Join(costly, ", "))
	}
	if err := k.pod(ctx, "counted", nil, func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{name: resource.MustParse("1")}
		offNodes(p, append(slices.Clone(quiet), costly...))
	}); err != nil {
		return err
	}
	v, err := k.proof(ctx, "counted")
	if err != nil {
		return err
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "counted", metav1.GetOptions{})
	if err != nil {
		return err
	}
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		return fmt.Errorf("the pod runs but its status names no claim for %s", name)
	}
	logf("pod asking for %s got claim %s and proves %q", name, st.ResourceClaimName, v)
	return nil
}

// opaqueConfig: a claim configured with the manifest's valid parameters
// runs; one with its invalid parameters is allocated and bound, and the
// kubelet reports that the driver refused to prepare it. The check passes
// on that report, never on a pod that has merely not started yet.
func (s *suite) opaqueConfig(ctx context.Context, logf logFunc, k *kit) error {
	configured := func(name string, params []byte) error {
		err := k.createClaimOf(ctx, name, resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{k.request("dev")},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"dev"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: s.m.Driver, Parameters: runtime.RawExtension{Raw: params}}}}},
		})
		if err != nil {
			return err
		}
		return k.pod(ctx, name, []string{name}, nil)
	}
	if err := configured("valid", s.m.OpaqueConfig.Valid); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "valid"); err != nil {
		return fmt.Errorf("with the valid configuration: %w", err)
	}
	if err := configured("invalid", s.m.OpaqueConfig.Invalid); err != nil {
		return err
	}
	refused, err := k.preparationRefused(ctx, "invalid")
	if err != nil {
		return fmt.Errorf("the invalid configuration %s: %w", s.m.OpaqueConfig.Invalid, err)
	}
	logf("invalid configuration refused: the kubelet reports %q", refused)
	return nil
}

// preparationRefused waits for the kubelet's report that it could not
// prepare a pod's claims, its FailedPrepareDynamicResources event, and
// returns the event's message, which carries the driver's error. It fails
// if the pod runs.
func (k *kit) preparationRefused(ctx context.Context, name string) (string, error) {
	var refused string
	what := fmt.Sprintf("the kubelet's %s event for pod %s, the evidence that the driver refused to prepare its claim", kubeletPrepareFailed, name)
	err := poll(ctx, k.m.Timeouts.PodRunning, what, func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		if pod.Status.Phase == v1.PodRunning || pod.Status.Phase == v1.PodSucceeded {
			return state, false, settle(fmt.Errorf("pod %s runs (%s): the driver prepared its claim", name, state))
		}
		if err := k.keptOff(ctx, pod); err != nil {
			return state, false, err
		}
		events, err := k.client.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=" + kubeletPrepareFailed,
		})
		if err != nil {
			return state, false, err
		}
		for _, e := range events.Items {
			if e.Reason == kubeletPrepareFailed && e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name && e.InvolvedObject.UID == pod.UID {
				refused = e.Message
				return state, true, nil
			}
		}
		return state + "; no " + kubeletPrepareFailed + " event", false, nil
	})
	return refused, err
}

// kubeletPrepareFailed is the reason of the kubelet's event for a pod
// whose claims a driver failed to prepare.
const kubeletPrepareFailed = "FailedPrepareDynamicResources"
