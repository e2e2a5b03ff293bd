package dashboard_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
)

// groupCluster is cluster() with a gang of three on the L4: PodGroup
// work/trainer (minCount 3) whose claim trainer-shared holds the L4 and is
// reserved for the group; trainer-0 runs with it, trainer-1 and trainer-2
// wait.
func groupCluster() []runtime.Object {
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "trainer"},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 3}},
			ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{{Name: "shared", ResourceClaimTemplateName: ptr.To("l4")}},
		},
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "trainer-shared"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: "gpu-l4", Device: "gpu-0"}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "trainer", UID: "g"}}
	member := func(name, node string) *v1.Pod {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name, UID: types.UID("u-" + name)},
			Spec: v1.PodSpec{NodeName: node, SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("trainer")},
				ResourceClaims: []v1.PodResourceClaim{{Name: "shared", ResourceClaimTemplateName: ptr.To("l4")}}},
		}
		if node != "" {
			p.Status.Phase = v1.PodRunning
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "shared", ResourceClaimName: ptr.To("trainer-shared")}}
		} else {
			p.Status.Phase = v1.PodPending
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "0/3 nodes are available: pod group trainer cannot be scheduled."}}
		}
		return p
	}
	return append(cluster(), pg, claim, member("trainer-0", "gpu-l4"), member("trainer-1", ""), member("trainer-2", ""))
}

// A group's waiting pods are framed together with its minCount and where
// its bound pods run, apart from pods of no group; a claim reserved for
// the group names the group and the pods that use it.
func TestBuildGroups(t *testing.T) {
	p := build(t, groupCluster()...)
	if len(p.Pending) != 1 || p.Pending[0].Pod != "work/late-0" {
		t.Errorf("pending pods of no group %+v, want work/late-0 alone", p.Pending)
	}
	if len(p.Groups) != 1 {
		t.Fatalf("groups %+v, want work/trainer", p.Groups)
	}
	g := p.Groups[0]
	var waiting []string
	for _, w := range g.Pending {
		waiting = append(waiting, w.Pod)
		if w.Reason == "" {
			t.Errorf("%s waits without a reason", w.Pod)
		}
	}
	if g.Name != "work/trainer" || g.MinCount != 3 || g.Pods != 3 || !slices.Equal(g.Bound, []string{"trainer-0 on gpu-l4"}) || !slices.Equal(waiting, []string{"work/trainer-1", "work/trainer-2"}) {
		t.Errorf("group %+v (waiting %v), want work/trainer: minCount 3, 3 pods, trainer-0 bound on gpu-l4, trainer-1 and trainer-2 waiting", g, waiting)
	}
	var holder *dashboard.Holder
	for _, n := range p.Nodes {
		for _, d := range n.Devices {
			if d.Ref == driver+"/gpu-l4/gpu-0" && len(d.Holders) == 1 {
				holder = &d.Holders[0]
			}
		}
	}
	if holder == nil || holder.Group != "work/trainer" || !slices.Equal(holder.Pods, []string{"work/trainer-0"}) {
		t.Errorf("the L4's holder %+v, want group work/trainer with pod work/trainer-0", holder)
	}
}

// The live page in a real browser frames the group: its waiting pods sit
// inside the group's box, which states the gang, the pod of no group
// outside any box, and the L4's holder names the group.
func TestDashboardGroupsInABrowser(t *testing.T) {
	b := browsertest.New(t)
	srv := newServer(t, fake.NewClientset(groupCluster()...))
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?token=s3cret")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(`section.group`)); err != nil {
		t.Fatalf("waiting for the group's box: %v", err)
	}
	framed, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('section.group[data-group="work/trainer"] li[data-pod]')).map(e => e.dataset.pod).join(",")`))
	if err != nil {
		t.Fatal(err)
	}
	if framed != "work/trainer-1,work/trainer-2" {
		t.Errorf("pods framed in the group's box: %q, want work/trainer-1,work/trainer-2", framed)
	}
	outside, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('.pending li[data-pod="work/late-0"]').closest("section.group") === null`))
	if err != nil || !outside {
		t.Errorf("work/late-0 inside a group's box (%v)", err)
	}
	// The box is drawn: a visible border around both waiting pods.
	boxed, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(function () {
	  var box = document.querySelector('section.group').getBoundingClientRect();
	  var border = getComputedStyle(document.querySelector('section.group')).borderTopWidth;
	  return parseFloat(border) > 0 && Array.from(document.querySelectorAll('section.group li')).every(function (li) {
	    var r = li.getBoundingClientRect();
	    return r.height > 0 && r.top >= box.top && r.bottom <= box.bottom && r.left >= box.left && r.right <= box.right;
	  });
	})()`))
	if err != nil || !boxed {
		t.Errorf("the group's pods are not drawn inside a bordered box (%v)", err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(`section.group .group-state`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "A gang of at least 3: 3 pods, 1 bound (trainer-0 on gpu-l4), 2 waiting."; strings.TrimSpace(state) != want {
		t.Errorf("the group says %q, want %q", state, want)
	}
	holder, err := chromedp.Run(ctx, chromedp.Text(`li.device[data-device="gpu.dralab.dev/gpu-l4/gpu-0"] li.holder`))
	if err != nil || !strings.Contains(holder, "group work/trainer: pod work/trainer-0") {
		t.Errorf("the L4's holder reads %q (%v), want the group and its pod", holder, err)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}
