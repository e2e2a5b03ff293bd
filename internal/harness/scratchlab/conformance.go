package scratchlab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// ConformanceConfig is the lab the conformance suite checks dralab's
// drivers on: the default lab, plus a node whose H100 is cut into MIG
// devices, one whose L4 is shared by memory and one whose H100 is
// fabric-attached, so that the partitionable-devices, consumable-capacity
// and binding-conditions checks of drivers/fakegpu/driver.yaml have
// devices to check. No other check's class selects a MIG device, a claim
// without a capacity request takes a shared L4 whole, and a pod of another
// check given the fabric H100 waits the attach delay (2 s) before it is
// bound. For drivers/fakenic/driver.yaml, a node with eight H100s and eight
// ConnectX-7 NICs (four of each per NUMA node, for the derived-attributes
// check), a node with eight A100s and a Socket Direct NIC whose numaNode
// is the list [0, 1] (list attributes: it pairs with an A100 of each
// NUMA node) and a node whose X710 ports skip node operations. The
// PodGroup API and its claims are on, for the group-claim check, and the
// alpha gates of derived and list-type attributes and optional node
// operations; every GPU served through DRA gives its containers device
// metadata. Each node's kubernetes.io/hostname label differs from its
// name (HostnameLabel), as on clusters that are not ours.
func ConformanceConfig() (*config.Config, error) {
	cfg := config.Default()
	cfg.Nodes = append(cfg.Nodes,
		config.Node{Name: "gpu-h100-mig", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Partitioning: config.PartitioningMIG}},
		config.Node{Name: "gpu-l4-shared", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Sharing: config.SharingMemory}},
		config.Node{Name: "gpu-h100-fabric", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Attach: config.AttachFabric}},
		config.Node{Name: "nic-h100", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 8}, NICs: &config.NICs{Profile: "cx7-400g", Count: 8}},
		config.Node{Name: "nic-sd", GPUs: &config.GPUs{Profile: "a100-80gb", Count: 8}, NICs: &config.NICs{Profile: "cx7-sd-400g", Count: 1, NUMANodeList: true}},
		config.Node{Name: "nic-quiet", NICs: &config.NICs{Profile: "x710-10g", Count: 2, SkipNodeOperations: true}},
	)
	// Every GPU served through DRA gives its containers device metadata.
	// The H100 server has a server's memory: its GPUs publish their host
	// memory overhead (the DRANodeAllocatableResources gate).
	for i := range cfg.Nodes {
		if g := cfg.Nodes[i].GPUs; g != nil && g.Mode != config.GPUModeDevicePlugin {
			g.DeviceMetadata = true
		}
		if cfg.Nodes[i].Name == "gpu-h100" {
			cfg.Nodes[i].Memory = "256Gi"
		}
		// As on clusters whose kubelets run with --hostname-override or
		// whose nodes a cloud names: the hostname label is not the
		// node's name, and a check that pinned pods by it would fail.
		if cfg.Nodes[i].Labels == nil {
			cfg.Nodes[i].Labels = map[string]string{}
		}
		cfg.Nodes[i].Labels[corev1.LabelHostname] = HostnameLabel(cfg.Nodes[i].Name)
	}
	cfg.EnableGroupClaims(config.GateDerivedAttributes, config.GateListTypeAttributes, config.GateOptionalNodeOperations, config.GateNodeAllocatableResources)
	return cfg, cfg.Complete()
}

// HostnameLabel is the kubernetes.io/hostname label of the conformance
// lab's node named node.
func HostnameLabel(node string) string { return "host-" + node }

// Conformance runs the conformance suite of o on the cluster of
// o.Kubeconfig when it is set, else on an embedded lab of labCfg (nil:
// ConformanceConfig) that it starts and deletes. A lab's own kubeconfig
// needs no consent; on an embedded lab the sanity layer runs on its
// busiest node, and on one it started the manifest's health commands act
// on it.
func Conformance(ctx context.Context, o conformance.Options, labCfg *config.Config) (_ *results.Report, err error) {
	o.Lab = lab.OfKubeconfig
	if o.Kubeconfig == "" {
		if labCfg == nil {
			if labCfg, err = ConformanceConfig(); err != nil {
				return nil, err
			}
		}
		l, err := Start(ctx, labCfg, "dralab-conformance")
		defer func() { err = errors.Join(err, Stop(context.WithoutCancel(ctx), l)) }()
		if err != nil {
			return nil, err
		}
		o.Kubeconfig = l.Kubeconfig()
		if o.Cluster.Image == "" {
			// Imported on a real node; any image "runs" on a hollow one.
			o.Cluster.Image = realnode.BusyboxImage
		}
		co, err := ClusterOptions(ctx, l)
		if err != nil {
			return nil, err
		}
		o.Cluster.CommandEnv, o.Cluster.PodResources = co.CommandEnv, co.PodResources
	}
	if o.Cluster.CommandEnv == nil {
		// A lab of this machine that the kubeconfig names: the manifest's
		// commands (dralab gpu fail) act on it, with this checkout's
		// dralab on their PATH.
		if t, err := target.Resolve(target.Request{Kubeconfig: o.Kubeconfig, Context: o.Context, Consent: o.Target, Lab: o.Lab}); err == nil && t.LabDir != "" {
			l, err := openLab(t.LabDir)
			if err != nil {
				return nil, err
			}
			co, err := ClusterOptions(ctx, l)
			if err != nil {
				return nil, err
			}
			o.Cluster.CommandEnv = co.CommandEnv
			if o.Cluster.PodResources == nil {
				o.Cluster.PodResources = co.PodResources
			}
		}
	}
	o.Sanity = func(ctx context.Context, t *target.Target, client kubernetes.Interface, m *manifest.Manifest) (sanity.Config, error) {
		if t.LabDir == "" {
			return sanity.Config{}, fmt.Errorf("%w, and %s is not an embedded lab's kubeconfig: run it on the embedded lab, or call drivers/conformance/sanity from the driver's own tests", conformance.ErrNoNode, t.Kubeconfig)
		}
		l, err := openLab(t.LabDir)
		if err != nil {
			return sanity.Config{}, err
		}
		return SanityConfig(ctx, l, client, m)
	}
	return conformance.Run(ctx, o)
}

// openLab opens the embedded lab whose state is in dir (the conformance
// target of a kubeconfig that is a lab's own).
func openLab(dir string) (*lab.Lab, error) {
	return lab.Open(filepath.Base(dir), lab.WithStateRoot(filepath.Dir(dir)))
}

// Lacks says what a lab of cfg lacks for the capabilities of dralab's
// driver that a manifest enables, as ConformanceConfig has them (each kind
// of device says what its driver's capabilities need: internal/
// nodedrivers). None for a lab running an outside driver, nor for another
// driver, whose devices are its own.
func Lacks(cfg *config.Config, m *manifest.Manifest) []string {
	k, ok := nodedrivers.OfDriver(m.Driver)
	if cfg.Driver != nil || !ok {
		return nil
	}
	var out []string
	for _, need := range k.ConformanceNeeds(cfg) {
		if (need.Capability == "" || m.Enabled(need.Capability)) && !need.Has {
			out = append(out, fmt.Sprintf("%s (for %s)", need.What, cmp.Or(string(need.Capability), m.Driver)))
		}
	}
	return out
}
