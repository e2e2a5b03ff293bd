package nicapp

import (
	"bytes"
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
)

// The NIC driver spells the topology attributes as the GPU driver does:
// otherwise one matchAttribute could not align a GPU and a NIC of a rack.
func TestTopologyAttributesMatchTheGPUs(t *testing.T) {
	if AttrRack != gpu.AttrRack || AttrNVLinkDomain != gpu.AttrNVLinkDomain {
		t.Errorf("NIC attributes %s, %s; GPU attributes %s, %s", AttrRack, AttrNVLinkDomain, gpu.AttrRack, gpu.AttrNVLinkDomain)
	}
}

// --list shows the configured NICs with the node's place; bad settings are
// one error naming the flag.
func TestListAndBadFlags(t *testing.T) {
	var out bytes.Buffer
	o := Options{NodeFlags: kit.NodeFlags{NodeName: "n"}, Profile: "cx7-400g", NICs: 3, NVLinkDomain: "nvl-a"}
	if err := List(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "  name: nic-"); got != 3 {
		t.Errorf("--list of 3 NICs shows %d:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), AttrNVLinkDomain+":\n      string: nvl-a") {
		t.Errorf("--list with --nvlink-domain nvl-a:\n%s", out.String())
	}
	for _, c := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.Profile = "" }, "--profile (or $DRALAB_PROFILE) is required: one of bf3-400g"},
		{func(o *Options) { o.Profile = "cx8" }, `--profile: no NIC profile "cx8"`},
		{func(o *Options) { o.NICs = 0 }, "--nics 0: a node needs at least one NIC"},
	} {
		bad := o
		c.mutate(&bad)
		if err := List(context.Background(), bad, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", bad, err, c.want)
		}
	}
	if err := Run(context.Background(), Options{Profile: "cx7-400g", NICs: 1}); err == nil || !strings.Contains(err.Error(), "--node-name (or $DRALAB_NODE_NAME) is required") {
		t.Errorf("Run without a node: %v", err)
	}
}

// One DaemonSet serves nodes of different NICs: each node's labels name
// its profile, NIC count and place; a profile flag wins over the label, a
// missing profile label or a count that is not a number is an error naming
// the node and label.
func TestFromNodeLabels(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		"nic.dralab.dev/profile": "cx7-400g", "nic.dralab.dev/nics": "8", "topology.dralab.dev/rack": "r1",
	}}}
	client := fake.NewClientset(node, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"nic.dralab.dev/nics": "many"}}})
	labels := Options{ProfileLabel: "nic.dralab.dev/profile", NICsLabel: "nic.dralab.dev/nics", RackLabel: "topology.dralab.dev/rack"}
	o := labels
	o.NodeName, o.NICs = "n1", 2
	if err := o.labels().FromNodeLabels(context.Background(), client, o.NodeName); err != nil || o.Profile != "cx7-400g" || o.NICs != 8 || o.Rack != "r1" {
		t.Errorf("n1: %+v, %v; want cx7-400g, 8 NICs, rack r1", o, err)
	}
	o = labels
	o.NodeName, o.Profile = "n1", "x710-10g"
	if err := o.labels().FromNodeLabels(context.Background(), client, o.NodeName); err != nil || o.Profile != "x710-10g" {
		t.Errorf("--profile beside the label: %q, %v; want the flag's", o.Profile, err)
	}
	o = labels
	o.NodeName = "n2"
	if err := o.labels().FromNodeLabels(context.Background(), client, o.NodeName); err == nil || !strings.Contains(err.Error(), "node n2 has no label nic.dralab.dev/profile") {
		t.Errorf("n2 without a profile label: %v", err)
	}
	o.Profile = "cx7-400g"
	if err := o.labels().FromNodeLabels(context.Background(), client, o.NodeName); err == nil || !strings.Contains(err.Error(), `node n2 label nic.dralab.dev/nics="many" is not a number`) {
		t.Errorf("n2's count: %v", err)
	}
}
