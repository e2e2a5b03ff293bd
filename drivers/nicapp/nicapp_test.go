package nicapp

import (
	"bytes"
	"context"
	"strings"
	"testing"

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
