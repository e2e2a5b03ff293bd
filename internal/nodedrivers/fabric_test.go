package nodedrivers

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// The plugin of network-attached GPUs runs on the nodes that reach a
// device of the lab's enclosures, by the labels the lab gives them (a
// rack's from its topology), and reads the file of enclosures the lab
// writes for it, whose devices on that node are those its labels reach.
func TestFabricKind(t *testing.T) {
	cfg, err := config.Example("racks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k, ok := OfDriver(fabric.DriverName)
	if !ok {
		t.Fatal("no kind of the driver of network-attached GPUs")
	}
	var runs []string
	for _, n := range cfg.Nodes {
		if k.Runs(cfg, n) {
			runs = append(runs, n.Name)
		}
	}
	if want := []string{"a1", "a2", "b1"}; !slices.Equal(runs, want) {
		t.Errorf("runs on %v, want %v (every node reaches the shared enclosure)", runs, want)
	}
	if d := k.Describe(cfg, cfg.Nodes[2]); d != "reaches shared-gpu-0, split-gpu-1, composable-gpu-0, composable-gpu-1, composable-gpu-2" {
		t.Errorf("b1: %q", d)
	}
	noShared := *cfg
	noShared.Fabric = slices.DeleteFunc(slices.Clone(cfg.Fabric), func(p config.FabricPool) bool { return p.AllNodes })
	if k.Runs(&noShared, config.Node{Name: "c1", Topology: &config.Topology{Rack: "c"}}) {
		t.Error("a node of rack c runs the plugin, reaching no enclosure")
	}

	nd := labstate.Dir(t.TempDir()).Node("b1")
	if err := WriteFiles(k, nd, cfg, cfg.Nodes[2]); err != nil {
		t.Fatal(err)
	}
	args := k.Args(nd, cfg, cfg.Nodes[2], 0)
	if args[0] != "fabric" || !slices.Contains(args, "--pools="+nd.FabricPools()) {
		t.Errorf("args %v", args)
	}
	pools, err := fabric.ReadPools(nd.FabricPools())
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 4 || pools[0].Memory.String() != "81559Mi" || pools[0].Attach || !pools[3].Attach {
		t.Errorf("pools %+v: want the four enclosures, rack a's of H100s, the composable one's attached", pools)
	}
	classes := DeviceClasses(cfg)
	if !slices.ContainsFunc(classes, func(c resourceapi.DeviceClass) bool { return c.Name == fabric.DriverName }) {
		t.Errorf("DeviceClasses %v lack %s", classes, fabric.DriverName)
	}
}
