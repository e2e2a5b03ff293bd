package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
)

// typedCluster is node gpu-a100-mig as the fake GPU driver publishes an
// A100 with MIG, two time slices and partition types, with pod sharer-0
// holding the first share.
func typedCluster(t *testing.T) []runtime.Object {
	t.Helper()
	const node = "gpu-a100-mig"
	p, err := fakegpu.LookupProfile("a100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	inv := &fakegpu.Inventory{Node: node, Profile: p, Count: 1, Partitioning: fakegpu.PartitioningMIG, TimeSlices: 2, PartitionTypes: true}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sets, err := inv.CounterSets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var api []resourceapi.Device
	for _, d := range devs {
		api = append(api, d.API)
	}
	pool, err := kit.Slices(api, sets)
	if err != nil {
		t.Fatal(err)
	}
	attr := resourceapi.FullyQualifiedName(driver + "/partitionType")
	var objs []runtime.Object
	for i, s := range pool {
		sl := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + string(rune('a'+i))},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: int64(len(pool))},
				Devices: s.Devices, SharedCounters: s.SharedCounters},
		}
		if len(s.Devices) > 0 {
			sl.Spec.PartitionTypeAttribute = &attr
		}
		objs = append(objs, sl)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "sharer-0"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: driver, Pool: node, Device: "gpu-0-ts-0"},
	}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "sharer-0", UID: types.UID("u-sharer-0")}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "sharer-0"}, Spec: v1.PodSpec{NodeName: node,
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("sharer-0")}}}}
	pod.Status.Phase = v1.PodRunning
	return append(objs, claim, pod)
}

// The node's partition types, as the lab counts them: with a share held,
// one share and no whole GPU left; every MIG placement fits by counters,
// which is all a pool status weighs, but the groups admit none.
func TestBuildPartitionTypes(t *testing.T) {
	p := build(t, typedCluster(t)...)
	got := map[string][3]int{}
	for _, n := range p.Nodes {
		for _, pt := range n.Partitions {
			if n.Name != "gpu-a100-mig" {
				t.Errorf("partition type %s on node %s", pt.Type, n.Name)
			}
			got[pt.Type] = [3]int{pt.Total, pt.Allocatable, pt.Admitted}
		}
		for _, d := range n.Devices {
			for _, h := range d.Holders {
				if h.Part != "gpu-0-ts-0 (time slice)" {
					t.Errorf("%s held as %q, want the share named", d.Ref, h.Part)
				}
			}
		}
	}
	for typ, want := range map[string][3]int{"gpu-0/time-slice": {2, 1, 1}, "gpu-0/whole": {1, 0, 0}, "gpu-0/1g.10gb@0": {1, 1, 0}, "gpu-0/7g.80gb@0": {1, 1, 0}} {
		if got[typ] != want {
			t.Errorf("partition type %s: (devices, allocatable, admitted) %v, want %v", typ, got[typ], want)
		}
	}
	if len(got) != 20 {
		t.Errorf("%d partition types, want 18 MIG placements, the shares and the whole GPU", len(got))
	}
}

// In a real browser the node's partition types open from a summary, each
// line saying how many of the type could be allocated and, where the
// compatibility groups admit fewer, how many.
func TestDashboardPartitionTypesInABrowser(t *testing.T) {
	b := browsertest.New(t)
	srv := newServer(t, fake.NewClientset(typedCluster(t)...))
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	const details = `section[data-node="gpu-a100-mig"] details.partitions`
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?token=s3cret")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(details+` summary`)); err != nil {
		t.Fatalf("waiting for the partition types: %v", err)
	}
	summary, err := chromedp.Run(ctx, chromedp.Text(details+` summary`))
	if err != nil || !strings.Contains(summary, "19 of 20 allocatable now") {
		t.Errorf("the summary reads %q (%v)", summary, err)
	}
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.querySelector('`+details+`').open && !document.querySelector('`+details+` li[data-type="gpu-0/time-slice"]').checkVisibility()`))
	if err != nil || !hidden {
		t.Errorf("the types show before the summary is opened (%v)", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Click(details+` summary`)); err != nil {
		t.Fatalf("opening the summary: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(details+` li[data-type="gpu-0/time-slice"]`)); err != nil {
		t.Fatalf("waiting for the types: %v", err)
	}
	for typ, want := range map[string]string{
		"gpu-0/time-slice": "gpu-0/time-slice: 1 of 2 allocatable",
		"gpu-0/1g.10gb@3":  "gpu-0/1g.10gb@3: 1 of 1 allocatable, compatibility groups admit 0",
		"gpu-0/whole":      "gpu-0/whole: 0 of 1 allocatable",
	} {
		text, err := chromedp.Run(ctx, chromedp.Text(details+` li[data-type="`+typ+`"]`))
		if err != nil || strings.TrimSpace(text) != want {
			t.Errorf("%s reads %q (%v), want %q", typ, text, err, want)
		}
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}
