package fabric

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/internal/slicetest"
)

// The three ways a pool is reached: a rack's enclosure, a fabric every node
// is on, and an enclosure whose devices are cabled to different racks.
func testPools() []Pool {
	mem := resource.MustParse("80Gi")
	return []Pool{
		{Name: "rack-a", Model: "h100-80gb", Memory: mem, Count: 2, NodeSelector: map[string]string{"topology.dralab.dev/rack": "a"}},
		{Name: "fabric", Model: "a100-80gb", Memory: mem, Count: 1, AllNodes: true},
		{Name: "split", Model: "l4-24gb", Memory: mem, Count: 2, PerDevice: []map[string]string{
			{"topology.dralab.dev/rack": "a"}, {"topology.dralab.dev/rack": "b"},
		}},
	}
}

func node(name, rack string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.dralab.dev/rack": rack}}}
}

// Every pool is one slice the API server accepts, with its node selection;
// GPUs that attach carry the binding conditions and bind to their node, and
// a GPU that failed to attach is tainted.
func TestPoolsAreValidSlices(t *testing.T) {
	attached := Pool{Name: "attached", Model: "h100-80gb", Memory: resource.MustParse("80Gi"), Count: 2, AllNodes: true, Attach: true, Failed: []int{1}}
	res, err := Resources(append(testPools(), attached))
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range res.Pools {
		slicetest.ValidatePool(t, DriverName, name, p)
	}
	if p := res.Pools["rack-a"]; p.NodeSelector == nil || p.AllNodes || p.Slices[0].PerDeviceNodeSelection != nil {
		t.Errorf("rack-a: %+v, want a node selector", p)
	}
	if p := res.Pools["fabric"]; !p.AllNodes || p.NodeSelector != nil {
		t.Errorf("fabric: %+v, want all nodes", p)
	}
	for i, d := range res.Pools["attached"].Slices[0].Devices {
		if !slices.Equal(d.BindingConditions, []string{ConditionAttached}) || !slices.Equal(d.BindingFailureConditions, []string{ConditionAttachFailed}) || !ptr.Deref(d.BindsToNode, false) {
			t.Errorf("attached GPU %s: binding conditions %v, failure conditions %v, bindsToNode %v", d.Name, d.BindingConditions, d.BindingFailureConditions, d.BindsToNode)
		}
		if tainted := len(d.Taints) == 1 && d.Taints[0].Key == TaintAttachFailed && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule; tainted != (i == 1) {
			t.Errorf("attached GPU %s: taints %v", d.Name, d.Taints)
		}
	}
	if d := res.Pools["rack-a"].Slices[0].Devices[0]; d.BindingConditions != nil || d.BindsToNode != nil || d.Taints != nil {
		t.Errorf("a GPU that does not attach: %+v", d)
	}
	p := res.Pools["split"]
	if !ptr.Deref(p.Slices[0].PerDeviceNodeSelection, false) || p.NodeSelector != nil || p.Slices[0].Devices[1].NodeSelector == nil {
		t.Errorf("split: %+v, want per-device node selection", p)
	}
}

// A node reaches a rack's devices only in that rack, a fabric's always, and
// a split enclosure's device by device.
func TestReached(t *testing.T) {
	pools := testPools()
	for _, tc := range []struct {
		node *v1.Node
		want []string
	}{
		{node("a1", "a"), []string{"rack-a-gpu-0", "rack-a-gpu-1", "fabric-gpu-0", "split-gpu-0"}},
		{node("b1", "b"), []string{"fabric-gpu-0", "split-gpu-1"}},
		{node("c1", "c"), []string{"fabric-gpu-0"}},
	} {
		devs, err := Inventory{Pools: pools, Node: tc.node}.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range devs {
			got = append(got, d.API.Name)
			if want := strings.TrimSuffix(strings.TrimSuffix(d.API.Name, "-gpu-0"), "-gpu-1"); d.Pool != want {
				t.Errorf("%s: pool %q, want %q", d.API.Name, d.Pool, want)
			}
			if d.API.NodeSelector != nil {
				t.Errorf("%s: a node's plugin has the device with a node selector", d.API.Name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("node %s reaches %v, want %v", tc.node.Name, got, tc.want)
		}
	}
}

// A pool says how it is reached in exactly one way, one selector per
// device where per device, and has a name the API takes.
func TestInvalidPools(t *testing.T) {
	base := testPools()[0]
	for _, tc := range []struct {
		change func(*Pool)
		want   string
	}{
		{func(p *Pool) { p.AllNodes = true }, "set exactly one of nodeSelector, allNodes and perDevice (2 set)"},
		{func(p *Pool) { p.NodeSelector = nil }, "(0 set)"},
		{func(p *Pool) { p.NodeSelector, p.PerDevice = nil, []map[string]string{{"a": "b"}} }, "perDevice has 1 node selectors for 2 devices"},
		{func(p *Pool) { p.NodeSelector, p.PerDevice = nil, []map[string]string{{"a": "b"}, {}} }, "perDevice[1] selects no labels"},
		{func(p *Pool) { p.Name = "Rack_A" }, `pool name "Rack_A"`},
		{func(p *Pool) { p.Count = 0 }, "count 0"},
		{func(p *Pool) { p.Model = "" }, "model is empty"},
	} {
		p := base
		tc.change(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	if _, err := Resources([]Pool{base, base}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a pool twice: %v", err)
	}
}

// The controller publishes each pool as one slice with its node selection
// and no node name.
func TestPublish(t *testing.T) {
	client := fake.NewClientset()
	// As the API server does: a slice's name from its generateName.
	n := 0
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			n++
			s.Name = s.GenerateName + strconv.Itoa(n)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := Publish(ctx, client, testPools())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var list *resourceapi.ResourceSliceList
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if list, err = client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err == nil && len(list.Items) == 3 {
			break
		}
	}
	if list == nil || len(list.Items) != 3 {
		t.Fatalf("slices %v", list)
	}
	for _, s := range list.Items {
		if s.Spec.NodeName != nil || s.Spec.Driver != DriverName {
			t.Errorf("slice of pool %s: node %v, driver %s", s.Spec.Pool.Name, s.Spec.NodeName, s.Spec.Driver)
		}
		reach := map[string]bool{
			"rack-a": s.Spec.NodeSelector != nil,
			"fabric": ptr.Deref(s.Spec.AllNodes, false),
			"split":  ptr.Deref(s.Spec.PerDeviceNodeSelection, false),
		}
		if !reach[s.Spec.Pool.Name] {
			t.Errorf("slice of pool %s: %+v", s.Spec.Pool.Name, s.Spec)
		}
	}
}
