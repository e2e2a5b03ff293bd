package scenarios

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

// Group expectations read the groups, their pods and claims as the
// scheduler and the claim controller left them.
func TestCheckGroups(t *testing.T) {
	scheduled := func(name string, ok bool, claims ...string) schedulingv1beta1.PodGroup {
		g := schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		status, reason := metav1.ConditionTrue, "Scheduled"
		if !ok {
			status, reason = metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable
		}
		g.Status.Conditions = []metav1.Condition{{Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: status, Reason: reason}}
		for _, c := range claims {
			g.Spec.ResourceClaims = append(g.Spec.ResourceClaims, schedulingv1beta1.PodGroupResourceClaim{Name: c, ResourceClaimTemplateName: ptr.To("t")})
			g.Status.ResourceClaimStatuses = append(g.Status.ResourceClaimStatuses, schedulingv1beta1.PodGroupResourceClaimStatus{Name: c, ResourceClaimName: ptr.To(name + "-" + c)})
		}
		return g
	}
	pod := func(name, group, node string) v1.Pod {
		return v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1.PodSpec{NodeName: node, SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}}}
	}
	node := func(name, domain string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"domain": domain}}}
	}
	groups := []schedulingv1beta1.PodGroup{scheduled("a", true, "shared"), scheduled("b", false)}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "a-shared", Namespace: "ns"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "a"}}
	snap := &allocation.Snapshot{
		Pods:   []v1.Pod{pod("a-0", "a", "n1"), pod("a-1", "a", "n2"), pod("b-0", "b", ""), pod("b-1", "b", "")},
		Claims: map[string]*resourceapi.ResourceClaim{"ns/a-shared": claim},
		Nodes:  map[string]*v1.Node{"n1": node("n1", "d1"), "n2": node("n2", "d1"), "n3": node("n3", "d2")},
	}
	rows := []allocation.Row{{Pod: "a-0", Claim: "a-shared", Device: "gpu-0"}, {Pod: "a-1", Claim: "a-shared", Device: "gpu-0"}}
	one := &Count{N: ptr.To(1)}
	for _, c := range []struct {
		name string
		e    GroupExpectation
		want string // "" holds
	}{
		{"one bound whole", GroupExpectation{Groups: "*", Count: one, Bound: BoundAll, Scheduled: ptr.To(true)}, ""},
		{"one bound not at all", GroupExpectation{Groups: "*", Count: one, Bound: BoundNone, Scheduled: ptr.To(false), Reason: "Unschedulable"}, ""},
		{"not every group bound", GroupExpectation{Groups: "*", Bound: BoundAll}, "group b: 0 of its 2 pods bound (none), want all"},
		{"two bound", GroupExpectation{Groups: "*", Count: &Count{N: ptr.To(2)}, Bound: BoundAll}, "1 of 2 groups meet it, want 2"},
		{"group claim", GroupExpectation{Groups: "a", Claims: []string{"shared"}, SameDomain: "domain"}, ""},
		{"no such claim", GroupExpectation{Groups: "b", Claims: []string{"shared"}}, "spec.resourceClaims has no entry shared"},
		{"no group", GroupExpectation{Groups: "c", Bound: BoundAll}, "no PodGroup matches"},
		{"not gone", GroupExpectation{Groups: "a", Gone: true}, "group a still exists"},
		{"gone", GroupExpectation{Groups: "c", Gone: true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := CheckGroups([]GroupExpectation{c.e}, groups, snap, rows, Inventory{})
			got := strings.Join(res[0].Failures, "; ")
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Errorf("failures %q, want %q", got, c.want)
			}
		})
	}

	// A pod of the group without the claim's devices, the claim reserved
	// for the pods, a group spread over two domains.
	snap.Pods[1].Spec.NodeName = "n3"
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "a-0"}}
	res := CheckGroups([]GroupExpectation{{Groups: "a", Claims: []string{"shared"}, SameDomain: "domain"}}, groups, snap, rows[:1], Inventory{})
	got := strings.Join(res[0].Failures, "; ")
	for _, want := range []string{"reserved for [pods/a-0], not for the group", "pod a-1 does not hold the devices of the group's claim a-shared", "span domain domains"} {
		if !strings.Contains(got, want) {
			t.Errorf("failures %q lack %q", got, want)
		}
	}
	// A claim owned by a deleted group is still there.
	claim.OwnerReferences = []metav1.OwnerReference{{Kind: "PodGroup", Name: "gone"}}
	res = CheckGroups([]GroupExpectation{{Groups: "gone", Gone: true}}, groups, snap, rows, Inventory{})
	if got := strings.Join(res[0].Failures, "; "); !strings.Contains(got, "claim ns/a-shared, owned by PodGroup gone, is still there") {
		t.Errorf("failures %q", got)
	}
}

// A count may be a share of what the cluster has: more than half its free
// 8-GPU servers.
func TestResolveDivideBy(t *testing.T) {
	inv := Inventory{Groups: map[string]map[string]map[string]int{"h100": {"productName": {"n1/H100": 8, "n2/H100": 8, "n3/H100": 8, "n4/H100": 8}}}}
	c := &Count{GroupsOf: &Groups{Tier: "h100", Size: 8, Attribute: "productName"}, DivideBy: 2, Plus: 1}
	if got := inv.Resolve(c); got != 3 {
		t.Errorf("Resolve(%s) = %d, want 3", c, got)
	}
	if s := c.String(); s != "(groups of 8 free h100 GPUs sharing productName) / 2 +1" {
		t.Errorf("String = %q", s)
	}
}
