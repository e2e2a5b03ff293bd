package scratchlab

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
)

// ConformanceConfig is the lab the conformance suite checks the fake
// driver on: the default lab, plus a node whose H100 is cut into MIG
// devices, one whose L4 is shared by memory and one whose H100 is
// fabric-attached, so that the partitionable-devices, consumable-capacity
// and binding-conditions checks of drivers/fakegpu/driver.yaml have
// devices to check. No other check's class selects a MIG device, a claim
// without a capacity request takes a shared L4 whole, and a pod of another
// check given the fabric H100 waits the attach delay (2 s) before it is
// bound. The PodGroup API and its claims are on, for the group-claim
// check.
func ConformanceConfig() (*config.Config, error) {
	cfg := config.Default()
	cfg.Nodes = append(cfg.Nodes,
		config.Node{Name: "gpu-h100-mig", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Partitioning: config.PartitioningMIG}},
		config.Node{Name: "gpu-l4-shared", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Sharing: config.SharingMemory}},
		config.Node{Name: "gpu-h100-fabric", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Attach: config.AttachFabric}},
	)
	cfg.EnableGroupClaims()
	return cfg, cfg.Complete()
}

// Conformance runs the conformance suite of o on the cluster of
// o.Kubeconfig when it is set, else on an embedded lab of labCfg (nil:
// ConformanceConfig) that it starts and deletes. A lab's own kubeconfig
// needs no consent; on an embedded lab the sanity layer runs on its
// busiest node, and on one it started the manifest's health commands act
// on it.
func Conformance(ctx context.Context, o conformance.Options, labCfg *config.Config) (_ *results.Report, err error) {
	o.Lab = labstate.LabOf
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
		if o.Cluster.CommandEnv, err = CommandEnv(ctx, l); err != nil {
			return nil, err
		}
	}
	if o.Cluster.CommandEnv == nil {
		// A lab of this machine that the kubeconfig names: the manifest's
		// commands (dralab gpu fail) act on it, with this checkout's
		// dralab on their PATH.
		if t, err := target.Resolve(target.Request{Kubeconfig: o.Kubeconfig, Context: o.Context, Consent: o.Target, Lab: o.Lab}); err == nil && t.LabDir != "" {
			if o.Cluster.CommandEnv, err = commandEnv(ctx, labstate.Dir(t.LabDir)); err != nil {
				return nil, err
			}
		}
	}
	o.Sanity = func(ctx context.Context, t *target.Target, client kubernetes.Interface, m *manifest.Manifest) (sanity.Config, error) {
		if t.LabDir == "" {
			return sanity.Config{}, fmt.Errorf("%w, and %s is not an embedded lab's kubeconfig: run it on the embedded lab, or call drivers/conformance/sanity from the driver's own tests", conformance.ErrNoNode, t.Kubeconfig)
		}
		return SanityConfig(ctx, t.LabDir, client, m)
	}
	return conformance.Run(ctx, o)
}

// Lacks says what a lab of cfg lacks for the fake GPU driver's capabilities
// that a manifest enables: a MIG node for partitionable devices, a shared
// node for consumable capacity, a fabric-attached node for binding
// conditions, the PodGroup API for group claims, as ConformanceConfig has
// them. None for another driver, whose devices are its own.
func Lacks(cfg *config.Config, m *manifest.Manifest) []string {
	if cfg.Driver != nil || m.Driver != gpu.DriverName {
		return nil
	}
	var mig, shared, fabric bool
	for _, n := range cfg.Nodes {
		if g := n.GPUs; g != nil && g.NVML == "" && g.Mode != config.GPUModeDevicePlugin {
			mig = mig || g.Partitioning == config.PartitioningMIG
			shared = shared || g.Sharing == config.SharingMemory
			fabric = fabric || g.Attach == config.AttachFabric
		}
	}
	var out []string
	for _, need := range []struct {
		capability manifest.Capability
		has        bool
		what       string
	}{
		{manifest.DRAPartitionableDevices, mig, "a GPU with partitioning: mig"},
		{manifest.DRAConsumableCapacity, shared, "a GPU with sharing: memory"},
		{manifest.DRADeviceBindingConditions, fabric, "a GPU with attach: fabric"},
		{manifest.DRAWorkloadResourceClaims, cfg.ServesGroupClaims(), "the PodGroup API (featureGates " + config.GateGenericWorkload + " and " + config.GateDRAWorkloadResourceClaims + ", runtimeConfig " + config.WorkloadAPIVersion + ")"},
	} {
		if m.Enabled(need.capability) && !need.has {
			out = append(out, fmt.Sprintf("%s (for %s)", need.what, need.capability))
		}
	}
	return out
}
