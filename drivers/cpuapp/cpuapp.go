// Package cpuapp is the application of dralab's CPU driver, cpu.dralab.dev:
// `dralab-driver cpu`, which the embedded lab runs beside each node that
// has `cpus:`. It publishes the node's core complexes (drivers/fakecpu),
// each mapped to the node's cpu, and gives a container the CPUs of its
// complexes. Every flag has an environment-variable twin.
package cpuapp

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/drivers/kit"
)

// Options are the driver's settings.
type Options struct {
	kit.NodeFlags
	Complexes      int
	CPUsPerComplex int
}

// env gives every flag its environment-variable twin, as the GPU and NIC
// drivers'.
var env = kit.Env{Prefix: "DRALAB_"}

// NewCommand returns the `cpu` command.
func NewCommand() *cobra.Command {
	o := Options{}
	cmd := o.Command("cpu",
		"dralab's CPU driver ("+fakecpu.DriverName+"): a DRA kubelet plugin for a node's core complexes",
		`dralab's CPU driver publishes a node's CPUs as core complexes (ccx-0, ccx-1, …), each a device
with its logical CPUs (cpuset, capacity cpus), its socket and its NUMA node
(resource.kubernetes.io/numaNode). Each complex maps to as many of the node's cpu as it has
(nodeAllocatableResources, which needs the DRANodeAllocatableResources gate): the scheduler
counts a claim's complexes against the node's CPUs. A container gets the complex's CPUs in
`+fakecpu.EnvPrefix+`_<n>_CPUSET.`,
		env,
		func(ctx context.Context, w io.Writer) error { return List(ctx, o, w) },
		func(ctx context.Context) error { return Run(ctx, o) })
	f := cmd.Flags()
	o.AddFlags(f, "/var/lib/dralab-cpu-driver")
	f.IntVar(&o.Complexes, "complexes", 0, fmt.Sprintf("number of core complexes (1 to %d)", fakecpu.MaxComplexes))
	f.IntVar(&o.CPUsPerComplex, "cpus-per-complex", 0, fmt.Sprintf("logical CPUs of each complex (1 to %d)", fakecpu.MaxCPUsPerComplex))
	env.Document(f)
	return cmd
}

func inventory(o Options) (*fakecpu.Inventory, error) {
	inv := &fakecpu.Inventory{Node: o.NodeName, Complexes: o.Complexes, CPUsPerComplex: o.CPUsPerComplex}
	if err := inv.Validate(); err != nil {
		return nil, fmt.Errorf("--%w", err)
	}
	return inv, nil
}

// Run runs the driver until ctx ends.
func Run(ctx context.Context, o Options) error {
	inv, err := inventory(o)
	if err != nil {
		return err
	}
	return o.RunDriver(ctx, env, fakecpu.DriverName, func(ctx context.Context, _ kubernetes.Interface, ko *kit.Options) error {
		ko.CDIKind, ko.EnvPrefix, ko.Inventory = fakecpu.CDIKind, fakecpu.EnvPrefix, inv
		klog.FromContext(ctx).Info("Publishing core complexes", "complexes", o.Complexes, "cpusPerComplex", o.CPUsPerComplex)
		return nil
	})
}

// List writes the devices the driver would publish to w, as YAML.
func List(ctx context.Context, o Options, w io.Writer) error {
	return o.ListDevices(ctx, w, func() (kit.Inventory, error) { return inventory(o) })
}
