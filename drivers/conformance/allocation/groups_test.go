package allocation

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A waiting pod of a group whose own claims fit is explained by the group:
// too few of its pods, too few devices for all of them, or no topology
// domain with enough.
func TestWhyGroup(t *testing.T) {
	ctx := context.Background()
	pool := func(node string, devs ...string) resourceapi.ResourceSlice {
		sl := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: drv, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
		for _, d := range devs {
			sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: d})
		}
		return sl
	}
	claim := func(name string, count int64) resourceapi.ResourceClaim {
		return resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "any", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}}}}}
	}
	held := claim("other", 1)
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpus", Driver: drv, Pool: "n1", Device: "gpu-0"}}}}
	pod := func(name string) v1.Pod {
		return v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1.PodSpec{
			SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")},
			ResourceClaims:  []v1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(name)}},
		}}
	}
	node := func(name, domain string) v1.Node {
		return v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"domain": domain}}}
	}
	group := func(minCount int32, key string) schedulingv1beta1.PodGroup {
		g := schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns"}, Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}}}
		if key != "" {
			g.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: key}}}
		}
		return g
	}
	// Two nodes in two domains, two devices each, one held: three free,
	// two in d2. Each pod needs two.
	snap := func(g schedulingv1beta1.PodGroup, pods ...string) *Snapshot {
		var ps []v1.Pod
		claims := []resourceapi.ResourceClaim{held}
		for _, p := range pods {
			ps = append(ps, pod(p))
			claims = append(claims, claim(p, 2))
		}
		s := NewSnapshot(Vocabulary{}, "ns", ps, claims, []resourceapi.ResourceSlice{pool("n1", "gpu-0", "gpu-1"), pool("n2", "gpu-0", "gpu-1")},
			[]resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "any"}}}, nil, []v1.Node{node("n1", "d1"), node("n2", "d2")})
		s.SetPodGroups([]schedulingv1beta1.PodGroup{g})
		return s
	}
	for _, c := range []struct {
		name string
		s    *Snapshot
		code string
		want []string
	}{
		{"incomplete", snap(group(2, ""), "w-0"), GangIncomplete, []string{"gang train (minCount 2, 1 pods, 0 bound)", "1 more pods must exist"}},
		{"short", snap(group(2, ""), "w-0", "w-1"), GangShort, []string{"its 2 unbound pods need 4 devices of any", "and 3 are free"}},
		{"topology", snap(group(1, "domain"), "w-0"), "", nil},
		{"topology short", func() *Snapshot {
			s := snap(group(2, "domain"), "w-0", "w-1")
			// Room for four in all, two per domain.
			s.AllClaims = s.AllClaims[1:]
			return s
		}(), TopologyShort, []string{"need 4 devices of any", "in one domain domain; d1 2 free; d2 2 free; 4 free in all"}},
		{"held in a domain", snap(group(1, "domain"), "w-0", "w-1"), TopologyShort, []string{"d1 1 free (held by other)", "d2 2 free"}},
		// Four free for two pods of two, but three on n1 and one on n2:
		// each pod's devices are on its node, so the nodes hold one pod.
		{"enough, not per node", func() *Snapshot {
			s := snap(group(2, ""), "w-0", "w-1")
			s.AllClaims = s.AllClaims[1:]
			s.Slices = []resourceapi.ResourceSlice{pool("n1", "gpu-0", "gpu-1", "gpu-2"), pool("n2", "gpu-0")}
			return s
		}(), GangShort, []string{"its 2 unbound pods need 4 devices of any", "and 4 are free, but the nodes hold 1 of its pods (n1 3, n2 1)"}},
		// The same in a domain: d1's nodes hold one pod of two, though
		// d1 has the four devices the group needs.
		{"enough in a domain, not per node", func() *Snapshot {
			s := snap(group(2, "domain"), "w-0", "w-1")
			s.AllClaims = s.AllClaims[1:]
			s.Slices = []resourceapi.ResourceSlice{pool("n1", "gpu-0", "gpu-1", "gpu-2"), pool("n3", "gpu-0")}
			s.Nodes["n3"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3", Labels: map[string]string{"domain": "d1"}}}
			return s
		}(), TopologyShort, []string{"d1 4 free, holding 1 of its pods (n1 3, n3 1)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.s.Pods[0]
			code, msg, err := c.s.why(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			if c.code == "" {
				if code != GangUnschedulable {
					t.Errorf("a group that fits: %s %q, want %s", code, msg, GangUnschedulable)
				}
				return
			}
			if code != c.code {
				t.Errorf("code %s (%q), want %s", code, msg, c.code)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

// The TIER cell: a GPU's tier; for a counted GPU, which names no device,
// its node's tier; for a device of no tier (a NIC beside the node's
// GPUs), none.
func TestTierCells(t *testing.T) {
	rows := []Row{
		{Pod: "gpu", Driver: "gpu.dralab.dev", Pool: "n", Device: "gpu-0", Tier: "l4", NodeTier: "l4", Node: "n"},
		{Pod: "counted", NodeTier: "l4", Node: "n"},
		{Pod: "nic", Driver: "nic.dralab.dev", Pool: "n", Device: "nic-0", NodeTier: "l4", Node: "n"},
	}
	header, body := Cells(rows)
	col := slices.Index(header, "TIER")
	got := []string{body[0][col], body[1][col], body[2][col]}
	if want := []string{"l4", "(node: l4)", "-"}; !slices.Equal(got, want) {
		t.Errorf("TIER cells = %q, want %q", got, want)
	}
}

// A group's members are its pods that are neither deleted nor ended, for
// the report's explanations and the dashboard alike: a finished pod of a
// group is not one of the pods the scheduler places.
func TestGroupMembers(t *testing.T) {
	pod := func(name string, phase v1.PodPhase, node string, deleted bool) v1.Pod {
		p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1.PodSpec{NodeName: node,
			SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")}}, Status: v1.PodStatus{Phase: phase}}
		if deleted {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	s := &Snapshot{Pods: []v1.Pod{
		pod("w-0", v1.PodRunning, "n1", false),
		pod("w-1", v1.PodSucceeded, "n1", false),
		pod("w-2", v1.PodRunning, "n2", true),
		pod("w-3", v1.PodPending, "", false),
		{ObjectMeta: metav1.ObjectMeta{Name: "lone", Namespace: "ns"}},
	}}
	var names []string
	for _, p := range s.GroupMembers("ns", "train") {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"w-0", "w-3"}) {
		t.Errorf("members of train: %v; want w-0 and w-3", names)
	}
	g, ok := s.groupOf(&s.Pods[3])
	if !ok || g.pods != 2 || g.unbound != 1 {
		t.Errorf("groupOf(w-3) = %+v; want 2 pods, 1 unbound", g)
	}
}
