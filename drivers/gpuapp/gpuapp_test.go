package gpuapp

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
)

// --partitioning and --sharing reach the fake inventory: --list shows the
// MIG devices, and a mode the GPUs cannot have is an error naming the flag.
func TestPartitioningAndSharingFlags(t *testing.T) {
	var out bytes.Buffer
	o := Options{Inventory: InventoryFake, Mode: ModeDRA, NodeFlags: kit.NodeFlags{NodeName: "n"}, Profile: "h100-80gb", GPUs: 1, Partitioning: "mig"}
	if err := List(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "  name: gpu-0-mig-"); got != 18 {
		t.Errorf("--list of a partitioned H100 shows %d MIG devices, want 18:\n%s", got, out.String())
	}
	for _, c := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.Profile = "l4-24gb" }, `--partitioning "mig": GPU profile l4-24gb has no MIG geometry`},
		{func(o *Options) { o.Sharing = "memory" }, `--sharing "memory": a GPU is partitioned or shared, not both`},
		{func(o *Options) { o.Mode = ModeDevicePlugin }, "--partitioning, --sharing, --attach, --time-slices and --host-memory-overhead need --mode dra"},
		{func(o *Options) {
			o.Partitioning, o.HostMemoryOverhead, o.ProfileFile, o.Profile = "", true, writeProfile(t, "hostMemoryOverhead: 2Gi", ""), ""
		}, "--host-memory-overhead: GPU profile l4-24gb declares no hostMemoryOverhead"},
		{func(o *Options) { o.Partitioning, o.Sharing = "", "mps" }, `--sharing "mps": want memory`},
	} {
		bad := o
		c.mutate(&bad)
		if err := List(context.Background(), bad, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", bad, err, c.want)
		}
	}
}

// writeProfile writes the built-in L4 profile with old replaced by new.
func writeProfile(t *testing.T, old, new string) string {
	t.Helper()
	data, err := os.ReadFile("../fakegpu/profiles/l4-24gb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("l4-24gb.yaml lacks %q", old)
	}
	file := filepath.Join(t.TempDir(), "l4.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(string(data), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// The topology comes from flags, or from the node's labels where the
// flags name labels (the chart's way), and reaches every GPU's attributes.
func TestTopologyFromFlagsAndNodeLabels(t *testing.T) {
	ctx := context.Background()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{gpu.NodeRackLabel: "r2", gpu.NodeNVLinkDomainLabel: "nvl-2"}}}
	o := Options{Inventory: InventoryFake, Mode: ModeDRA, NodeFlags: kit.NodeFlags{NodeName: "n"}, Profile: "h100-80gb", GPUs: 1, Rack: "r1", NVLinkDomain: "nvl-1"}
	var out bytes.Buffer
	if err := List(ctx, o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), gpu.AttrNVLinkDomain+":\n      string: nvl-1") || !strings.Contains(out.String(), gpu.AttrRack+":\n      string: r1") {
		t.Errorf("--list with --rack r1 --nvlink-domain nvl-1:\n%s", out.String())
	}
	o.RackLabel, o.NVLinkDomainLabel = gpu.NodeRackLabel, gpu.NodeNVLinkDomainLabel
	if err := o.labels().FromNodeLabels(ctx, fake.NewClientset(node), o.NodeName); err != nil {
		t.Fatal(err)
	}
	if o.topology() != (gpu.Topology{Rack: "r2", NVLinkDomain: "nvl-2"}) {
		t.Errorf("topology from the node's labels = %+v", o.topology())
	}
}
