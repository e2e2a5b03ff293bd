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
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/internal/dashboard/browsertest"
)

// rackCluster is a rack's pool of fabric GPUs that two of three nodes
// reach (a slice nodeSelector on the rack label), and a node's pool of two
// slices being republished: generation 2 has one of its two slices, and
// generation 1's are still there.
func rackCluster() []runtime.Object {
	node := func(name, rack string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.dralab.dev/rack": rack}}}
	}
	gpu := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")}}}
	}
	rack := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "rack-a"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver,
		Pool: resourceapi.ResourcePool{Name: "rack-a", Generation: 1, ResourceSliceCount: 1},
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "topology.dralab.dev/rack", Operator: v1.NodeSelectorOpIn, Values: []string{"a"}}}}}},
		Devices: []resourceapi.Device{gpu("fabric-0"), gpu("fabric-1")}}}
	slice := func(name string, gen int64, devs ...string) *resourceapi.ResourceSlice {
		sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To("n3"),
			Pool: resourceapi.ResourcePool{Name: "n3", Generation: gen, ResourceSliceCount: 2}}}
		for _, d := range devs {
			sl.Spec.Devices = append(sl.Spec.Devices, gpu(d))
		}
		return sl
	}
	return []runtime.Object{node("n1", "a"), node("n2", "a"), node("n3", "b"), rack,
		slice("n3-old-0", 1, "gpu-0"), slice("n3-old-1", 1, "gpu-1"), slice("n3-new-0", 2, "gpu-0")}
}

// A pool several nodes reach is one row naming the nodes it reaches; a
// pool being republished shows its newest generation's devices only, and
// says the allocator takes none of them until every slice is in.
func TestBuildPoolShapes(t *testing.T) {
	p := build(t, rackCluster()...)
	rows := map[string]int{}
	for i, n := range p.Nodes {
		rows[n.Name] = i
	}
	rack, ok := rows["rack-a"]
	if !ok {
		t.Fatalf("no row for the rack's pool: %+v", p.Nodes)
	}
	if got := p.Nodes[rack]; strings.Join(got.Reaches, ",") != "n1,n2" || len(got.Devices) != 2 {
		t.Errorf("the rack's row reaches %v with %d devices; want n1,n2 and both devices", got.Reaches, len(got.Devices))
	}
	n3 := p.Nodes[rows["n3"]]
	if len(n3.Devices) != 1 || n3.Devices[0].Name != "gpu-0" || len(n3.Reaches) != 0 {
		t.Errorf("n3 draws %+v (reaches %v); want generation 2's gpu-0 alone", n3.Devices, n3.Reaches)
	}
	if want := "pool " + driver + "/n3: 1 of its 2 slices of generation 2 published; the allocator takes none of its devices until every one is"; len(n3.Incomplete) != 1 || n3.Incomplete[0] != want {
		t.Errorf("n3 says %q; want %q", n3.Incomplete, want)
	}
}

// In a browser, the rack's row names the nodes it reaches and the node
// being republished says its pool is incomplete, beside its one device.
func TestDashboardPoolShapesInABrowser(t *testing.T) {
	b := browsertest.New(t)
	srv := newServer(t, fake.NewClientset(rackCluster()...))
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?token=s3cret")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(`section[data-node="rack-a"] p.reaches`)); err != nil {
		t.Fatalf("waiting for the rack's row: %v", err)
	}
	reaches, err := chromedp.Run(ctx, chromedp.Text(`section[data-node="rack-a"] p.reaches`))
	if err != nil || strings.TrimSpace(reaches) != "A pool no one node owns, reachable from n1, n2" {
		t.Errorf("the rack's row reads %q (%v)", reaches, err)
	}
	incomplete, err := chromedp.Run(ctx, chromedp.Text(`section[data-node="n3"] p.incomplete`))
	if err != nil || !strings.Contains(incomplete, "1 of its 2 slices of generation 2 published") {
		t.Errorf("n3's row reads %q (%v)", incomplete, err)
	}
	devices, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('section[data-node="n3"] li.device').length`))
	if err != nil || devices != 1 {
		t.Errorf("n3 draws %d devices (%v), want generation 2's one", devices, err)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}
