package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

// agree checks, in a scenario step's settled state, that `kubectl dra`'s
// reading (the allocation package with no vocabulary, as on any cluster)
// agrees with the scheduler:
//   - every pod the scheduler bound had a feasible node in the plugin's
//     reading just before: with the pod's own allocations taken back, each
//     request of its claims has an alternative with enough free devices on
//     the pod's node;
//   - every pod the scheduler found unschedulable the plugin explains as
//     blocked (a reason), and finds no alternative that fits on one node
//     where the reason is about devices.
//
// A pod whose devices were tainted or unpublished since it was bound (a
// failed GPU) is left out: the state it was bound in is gone.
func agree(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace string) {
	t.Helper()
	s, err := allocation.Read(ctx, client, namespace, allocation.Vocabulary{})
	if err != nil {
		t.Errorf("agreement: reading %s: %v", namespace, err)
		return
	}
	rows, err := s.Rows(ctx)
	if err != nil {
		t.Errorf("agreement: %v", err)
		return
	}
	devs, err := s.DeviceRows(ctx)
	if err != nil {
		t.Errorf("agreement: %v", err)
		return
	}
	tainted := map[string]bool{} // driver/pool/device of every published device → tainted
	for _, d := range devs {
		tainted[d.Driver+"/"+d.Pool+"/"+d.Device] = len(d.Taints) > 0
	}
	for i := range s.Pods {
		pod := &s.Pods[i]
		switch {
		case pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		case pod.Spec.NodeName != "":
			agreeBound(ctx, t, s, tainted, pod)
		case allocation.Unschedulable(pod):
			agreeBlocked(ctx, t, client, s, rows, pod)
		}
	}
}

// agreeBound: the pod's request fit its node before it was bound.
// tainted has every published device, and whether it is tainted now.
func agreeBound(ctx context.Context, t *testing.T, s *allocation.Snapshot, tainted map[string]bool, pod *v1.Pod) {
	t.Helper()
	// Before: the pod unbound, the claims reserved for it unallocated.
	var claims []resourceapi.ResourceClaim
	own := map[string]bool{}
	for _, c := range s.AllClaims {
		mine := slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
			return r.Resource == "pods" && r.Name == pod.Name
		}) && c.Namespace == pod.Namespace
		if mine && c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				own[r.Driver+"/"+r.Pool+"/"+r.Device] = true
			}
			c = *c.DeepCopy()
			c.Status.Allocation, c.Status.ReservedFor = nil, nil
		}
		claims = append(claims, c)
	}
	if len(own) == 0 {
		return // no device of its own: counted GPUs, a group's claim
	}
	for key := range own {
		if taint, published := tainted[key]; taint || !published {
			return // tainted or unpublished since: the state it was bound in is gone
		}
	}
	before := pod.DeepCopy()
	before.Spec.NodeName = ""
	pods := slices.Clone(s.Pods)
	for i := range pods {
		if pods[i].Namespace == pod.Namespace && pods[i].Name == pod.Name {
			pods[i] = *before
		}
	}
	var classes []resourceapi.DeviceClass
	for _, c := range s.Classes {
		classes = append(classes, *c)
	}
	var nodes []v1.Node
	for _, n := range s.Nodes {
		nodes = append(nodes, *n)
	}
	then := allocation.NewSnapshot(allocation.Vocabulary{}, pod.Namespace, pods, claims, s.Slices, classes, s.TaintRules, nodes)
	then.Features = s.Features
	then.Bound = slices.DeleteFunc(slices.Clone(s.Bound), func(p v1.Pod) bool { return p.Namespace == pod.Namespace && p.Name == pod.Name })
	v, err := then.Verdict(ctx, before)
	if err != nil || v == nil {
		t.Errorf("agreement: %s/%s: the allocator on the state before: %v, %v", pod.Namespace, pod.Name, v, err)
		return
	}
	if !slices.Contains(v.Fits(), pod.Spec.NodeName) {
		t.Errorf("agreement: the scheduler bound %s/%s to %s, but the allocator, on the state before, places its claims on %v only (%+v)",
			pod.Namespace, pod.Name, pod.Spec.NodeName, v.Fits(), v.Nodes)
	}
}

// deviceReasons are the reasons about devices: the allocator must place
// the pod's claims on no node the pod may use.
var deviceReasons = []string{allocation.NoMatchingDevice, allocation.AllAllocated, allocation.Tainted, allocation.NotOnOneNode,
	allocation.ConstraintUnmet, allocation.TooFew, allocation.PoolIncomplete, allocation.CounterExhausted, allocation.CapacityExhausted,
	allocation.IncompatibleGroups, allocation.SelectorError, allocation.AllocatorError, allocation.Unexplained}

// nodeReasons are the reasons outside DRA: the allocator places the claims
// on some node, and on none the pod may use.
var nodeReasons = []string{allocation.NodeTaint, allocation.NodeSelector, allocation.NodeUnschedulable, allocation.NodeNotReady}

// agreeBlocked: a pod the scheduler could not place, the plugin explains,
// and the allocator's verdict bears the reason out: a reason about devices
// where the allocator places the claims on no node the pod may use, a
// reason about nodes where it places them only on nodes the pod may not
// use, and each reason's blocking object where the reason names one (the
// holder of a device, a taint). The scheduler's word may be older than the
// state (it tries again after a backoff): a pod the allocator places on a
// node it may use is read again until the scheduler had its turn, and only
// one still waiting then is a disagreement.
func agreeBlocked(ctx context.Context, t *testing.T, client kubernetes.Interface, s *allocation.Snapshot, rows []allocation.Row, pod *v1.Pod) {
	t.Helper()
	code, msg := "", ""
	for _, r := range rows {
		if r.Namespace == pod.Namespace && r.Pod == pod.Name {
			code, msg = r.ReasonCode, r.Reason
		}
	}
	v, err := s.Verdict(ctx, pod)
	if err != nil {
		t.Errorf("agreement: %s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	if v == nil || len(v.Claims) == 0 {
		return // no claim made yet, or none left to allocate
	}
	where := func() string { return fmt.Sprintf("fits on %v, usable %v", v.Fits(), v.Usable()) }
	switch {
	case slices.Contains(deviceReasons, code):
		if len(v.Usable()) > 0 {
			t.Errorf("agreement: %s/%s is explained as %s (%s), but the allocator %s", pod.Namespace, pod.Name, code, msg, where())
		}
		checkNamed(t, s, pod, code, msg)
		return
	case slices.Contains(nodeReasons, code):
		if len(v.Fits()) == 0 || len(v.Usable()) > 0 {
			t.Errorf("agreement: %s/%s is explained as %s (%s), but the allocator %s", pod.Namespace, pod.Name, code, msg, where())
		}
		return
	case code != "" && code != allocation.NotRetried && code != allocation.NotDRA && code != allocation.Insufficient:
		return // node resources, gangs: explained, and not by the allocator alone
	}
	if len(v.Usable()) == 0 {
		t.Errorf("agreement: %s/%s is explained as %q (%s), yet the allocator places its claims on no node it may use (%s)", pod.Namespace, pod.Name, code, msg, where())
		return
	}
	// Placeable: read again until the scheduler had its turn. A pod it
	// could not place waits its backoff (1 s, doubled on each try, at most
	// 10 s) before it is tried again, and longer on a loaded machine.
	if code == allocation.Insufficient || code == allocation.NotRetried {
		return // the node's CPU or memory, or a refusal the scheduler does not retry
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, schedulerRetry, false, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil || p.Spec.NodeName != "" || p.DeletionTimestamp != nil, nil
	})
	if err == nil {
		return
	}
	t.Errorf("agreement: the scheduler leaves %s/%s unschedulable for %s, but the plugin explains it with reason %q and the allocator %s",
		pod.Namespace, pod.Name, schedulerRetry, code, where())
}

// checkNamed: a reason that blames a holder names a claim that holds a
// device; one that blames a taint names a taint a device has.
func checkNamed(t *testing.T, s *allocation.Snapshot, pod *v1.Pod, code, msg string) {
	t.Helper()
	switch code {
	case allocation.AllAllocated, allocation.CounterExhausted:
		for _, c := range s.AllClaims {
			if c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) > 0 && strings.Contains(msg, c.Name) {
				return
			}
		}
		t.Errorf("agreement: %s/%s is explained as %s, naming no claim that holds a device: %s", pod.Namespace, pod.Name, code, msg)
	case allocation.Tainted:
		for _, sl := range s.Slices {
			for _, d := range sl.Spec.Devices {
				for _, taint := range s.DeviceTaints(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name) {
					if key, _, _ := strings.Cut(taint, ":"); strings.Contains(msg, strings.SplitN(key, "=", 2)[0]) {
						return
					}
				}
			}
		}
		t.Errorf("agreement: %s/%s is explained as %s, naming no taint a device has: %s", pod.Namespace, pod.Name, code, msg)
	}
}

// schedulerRetry is how long a pod the plugin finds placeable may stay
// unschedulable: the scheduler's longest backoff (10 s) and its try.
const schedulerRetry = 20 * time.Second
