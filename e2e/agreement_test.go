package e2e

import (
	"context"
	"errors"
	"maps"
	"slices"
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
	then.Bound = slices.DeleteFunc(slices.Clone(s.Bound), func(p v1.Pod) bool { return p.Namespace == pod.Namespace && p.Name == pod.Name })
	cands, err := then.Candidates(ctx, before)
	if errors.Is(err, allocation.ErrNoPendingClaims) {
		return
	}
	if err != nil {
		t.Errorf("agreement: %s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	if !fitsOn(cands, pod.Spec.NodeName) {
		t.Errorf("agreement: the scheduler bound %s/%s to %s, but in the plugin's reading of the state before, not every request of its claims has an alternative that fits there (free per node: %v)",
			pod.Namespace, pod.Name, pod.Spec.NodeName, allocation.FreePerNode(cands))
	}
}

// fitsOn tells whether every request of the candidates (claim/request) has
// an alternative with enough free devices that the node reaches: its own
// and those any node reaches ("" for a node: those alone). A claim's
// devices come from one node, and a pod's requests are all met there.
func fitsOn(cands []allocation.Candidate, node string) bool {
	free := map[string]int{} // claim/request/subrequest → free devices the node reaches
	requests := map[string]bool{}
	for _, c := range cands {
		alt := c.Alternative()
		requests[c.Claim+"/"+c.Request] = false
		if c.State == allocation.StateFree && (c.Node == "" || c.Node == node) {
			free[alt]++
		}
	}
	for _, c := range cands {
		if free[c.Alternative()] >= c.Count {
			requests[c.Claim+"/"+c.Request] = true
		}
	}
	for _, ok := range requests {
		if !ok {
			return false
		}
	}
	return len(requests) > 0
}

// fittingNode is a node on which every request of the candidates fits
// (fitsOn); "any node" when devices no node owns are enough; "" for none.
func fittingNode(cands []allocation.Candidate) string {
	nodes := map[string]bool{}
	for _, c := range cands {
		if c.Node != "" {
			nodes[c.Node] = true
		}
	}
	for _, node := range slices.Sorted(maps.Keys(nodes)) {
		if fitsOn(cands, node) {
			return node
		}
	}
	if fitsOn(cands, "") {
		return "any node"
	}
	return ""
}

// deviceReasons are the reasons about devices, which the candidates must
// bear out: no alternative fits on one node.
var deviceReasons = []string{allocation.NoMatchingDevice, allocation.AllAllocated, allocation.Tainted, allocation.NotOnOneNode}

// agreeBlocked: a pod the scheduler could not place, the plugin explains
// as blocked. The scheduler's word may be older than the state (it tries
// again after a backoff): a pod the plugin finds placeable is read again
// until the scheduler had its turn, and only one still waiting then is a
// disagreement.
func agreeBlocked(ctx context.Context, t *testing.T, client kubernetes.Interface, s *allocation.Snapshot, rows []allocation.Row, pod *v1.Pod) {
	t.Helper()
	code := ""
	for _, r := range rows {
		if r.Namespace == pod.Namespace && r.Pod == pod.Name {
			code = r.ReasonCode
		}
	}
	if code != "" && code != allocation.NotRetried && !slices.Contains(deviceReasons, code) {
		return // node resources, gangs, counters, capacity: explained, and not by free devices alone
	}
	cands, err := s.Candidates(ctx, pod)
	if errors.Is(err, allocation.ErrNoPendingClaims) {
		return
	}
	if err != nil {
		t.Errorf("agreement: %s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	fitting := fittingNode(cands)
	if code != "" && fitting == "" {
		return
	}
	if code == allocation.NotRetried {
		// The plugin says the scheduler's refusal is stale: a node has
		// room now. Its devices must fit somewhere too.
		if fitting == "" {
			t.Errorf("agreement: the plugin explains %s/%s as %s (room now), but finds no node where every request of its claims fits", pod.Namespace, pod.Name, code)
		}
		return
	}
	// Placeable, or no reason: read again until the scheduler had its
	// turn. A pod it could not place waits its backoff (1 s, doubled on
	// each try, at most 10 s) before it is tried again, and longer on a
	// loaded machine.
	err = wait.PollUntilContextTimeout(ctx, time.Second, schedulerRetry, false, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil || p.Spec.NodeName != "" || p.DeletionTimestamp != nil, nil
	})
	if err == nil {
		return
	}
	t.Errorf("agreement: the scheduler leaves %s/%s unschedulable for %s, but the plugin explains it with reason %q and finds %q fitting",
		pod.Namespace, pod.Name, schedulerRetry, code, fitting)
}

// schedulerRetry is how long a pod the plugin finds placeable may stay
// unschedulable: the scheduler's longest backoff (10 s) and its try.
const schedulerRetry = 20 * time.Second
