package nodedrivers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/drivers/fabricapp"
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// RoleFabricDriver is the process role of the plugin of network-attached
// GPUs on a node.
const RoleFabricDriver = "fabric-driver"

// fabricKind is dralab's driver of network-attached GPUs
// (fabric.dralab.dev), `dralab-driver fabric`: its kubelet plugin runs on
// every node that reaches a device of the lab's enclosures (config.Fabric),
// whose pools the lab process publishes (PublishFabric).
type fabricKind struct{}

func init() { register(40, fabricKind{}) }

func (fabricKind) Command() *cobra.Command { return fabricapp.NewCommand() }

func (fabricKind) Name() string                 { return "driver of network-attached GPUs" }
func (fabricKind) Role() string                 { return RoleFabricDriver }
func (fabricKind) Driver(*config.Config) string { return fabric.DriverName }
func (fabricKind) Mode(config.Node) string      { return driverauth.ModeNetworkAttached }
func (fabricKind) Runs(cfg *config.Config, n config.Node) bool {
	return cfg.Driver == nil && len(reachedBy(cfg, n)) > 0
}

// FabricPools are the lab's enclosures as the driver takes them, each
// GPU of its profile's memory.
func FabricPools(cfg *config.Config) ([]fabric.Pool, error) {
	var out []fabric.Pool
	for _, p := range cfg.Fabric {
		profile, err := fakegpu.LookupProfile(p.Profile)
		if err != nil {
			return nil, fmt.Errorf("fabric pool %s: %w", p.Name, err)
		}
		out = append(out, fabric.Pool{Name: p.Name, Model: p.Profile, Memory: profile.Memory, Count: p.Count,
			NodeSelector: p.NodeSelector, AllNodes: p.AllNodes, PerDevice: p.PerDevice, Attach: p.AttachDelay != ""})
	}
	return out, nil
}

// reachedBy are the devices of the lab's enclosures that node n reaches,
// by its labels, as the scheduler matches them.
func reachedBy(cfg *config.Config, n config.Node) []string {
	pools, err := FabricPools(cfg)
	if err != nil || len(pools) == 0 {
		return nil
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: Labels(cfgWithoutFabric(cfg), n)}}
	devs, err := fabric.Inventory{Pools: pools, Node: node}.Devices(context.Background())
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range devs {
		out = append(out, d.API.Name)
	}
	return out
}

// cfgWithoutFabric is cfg without its enclosures: a node's labels are the
// other kinds' (the fabric kind puts none), and asking for them must not
// ask the fabric kind again.
func cfgWithoutFabric(cfg *config.Config) *config.Config {
	c := *cfg
	c.Fabric = nil
	return &c
}

// Args runs the plugin with the file of the enclosures, which WriteFiles
// writes.
func (k fabricKind) Args(nd labstate.NodeDir, _ *config.Config, n config.Node, verbosity int) []string {
	return append([]string{"fabric", "--pools=" + nd.FabricPools()}, kubeletArgs(nd, k.Role(), n, verbosity)...)
}

// WriteFiles writes the file of the enclosures the node's plugin reads.
func (fabricKind) WriteFiles(nd labstate.NodeDir, cfg *config.Config, _ config.Node) error {
	pools, err := FabricPools(cfg)
	if err != nil {
		return err
	}
	data, err := json.Marshal(pools)
	if err != nil {
		return err
	}
	return atomicfile.Write(nd.FabricPools(), data, 0o644)
}

func (fabricKind) Labels(config.Node) map[string]string { return nil }

func (fabricKind) DeviceClasses(config.Node) []resourceapi.DeviceClass {
	return []resourceapi.DeviceClass{fabric.DeviceClass()}
}

func (fabricKind) Describe(cfg *config.Config, n config.Node) string {
	return "reaches " + strings.Join(reachedBy(cfg, n), ", ")
}

// NotReady: the node publishes none of these devices; the lab process
// waits for the enclosures' pools itself.
func (fabricKind) NotReady(*config.Config, config.Node, Published) string { return "" }

// Releases: none; a kind lab refuses enclosures (lab/config's limits).
func (fabricKind) Releases(*config.Config) []Release { return nil }

// ConformanceNeeds: nil, for now: the suite's placement reads node-local
// slices.
func (fabricKind) ConformanceNeeds(*config.Config) []Need { return nil }

func (fabricKind) StartsWithNode(config.Node) bool { return false }
