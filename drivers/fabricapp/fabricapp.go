// Package fabricapp is the application of dralab's driver of
// network-attached accelerators, fabric.dralab.dev: `dralab-driver fabric`,
// the kubelet plugin that runs on every node and prepares the devices its
// node reaches, and `dralab-driver fabric controller`, which publishes the
// enclosures' pools for every node once. Both read the same file of pools.
// Every flag has an environment-variable twin.
package fabricapp

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/drivers/kit"
)

// Options are the kubelet plugin's settings.
type Options struct {
	kit.NodeFlags
	// PoolsFile is the file of the enclosures' pools (a JSON list of
	// fabric.Pool), the same as the controller's.
	PoolsFile string
}

var env = kit.Env{Prefix: "DRALAB_"}

// NewCommand returns the `fabric` command, with `fabric controller`.
func NewCommand() *cobra.Command {
	o := Options{}
	cmd := o.Command("fabric",
		"dralab's driver of network-attached GPUs ("+fabric.DriverName+"): the kubelet plugin of every node",
		`dralab's driver of network-attached GPUs: GPUs in enclosures that several nodes reach (a rack's,
or a fabric's), published once for all of them by the driver's controller (`+"`fabric controller`"+`) with a
slice node selector, all nodes, or per-device node selection. This kubelet plugin runs on every node:
it reads its Node's labels, prepares the devices of the pools its node reaches and publishes none.`,
		env,
		func(ctx context.Context, w io.Writer) error { return List(ctx, o, w) },
		func(ctx context.Context) error { return Run(ctx, o) })
	f := cmd.Flags()
	o.AddFlags(f, "/var/lib/dralab-fabric-driver")
	f.StringVar(&o.PoolsFile, "pools", "", "the file of the enclosures' pools, a JSON list (required; the controller's)")
	env.Document(f)
	cmd.AddCommand(newControllerCommand())
	return cmd
}

// Run runs the kubelet plugin until ctx ends.
func Run(ctx context.Context, o Options) error {
	return o.RunDriver(ctx, env, fabric.DriverName, func(ctx context.Context, client kubernetes.Interface, ko *kit.Options) error {
		inv, err := inventory(ctx, o, client)
		if err != nil {
			return err
		}
		ko.CDIKind, ko.EnvPrefix, ko.Inventory = fabric.CDIKind, fabric.EnvPrefix, inv
		klog.FromContext(ctx).Info("Preparing network-attached GPUs", "pools", len(inv.Pools))
		return nil
	})
}

func inventory(ctx context.Context, o Options, client kubernetes.Interface) (fabric.Inventory, error) {
	if o.PoolsFile == "" {
		return fabric.Inventory{}, fmt.Errorf("%s is required", env.Flag("pools"))
	}
	pools, err := fabric.ReadPools(o.PoolsFile)
	if err != nil {
		return fabric.Inventory{}, fmt.Errorf("%s: %w", env.Flag("pools"), err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
	if err != nil {
		return fabric.Inventory{}, fmt.Errorf("reading node %s, whose labels say which enclosures it reaches: %w", o.NodeName, err)
	}
	return fabric.Inventory{Pools: pools, Node: node}, nil
}

// List writes the devices the plugin would prepare on its node to w, as
// YAML.
func List(ctx context.Context, o Options, w io.Writer) error {
	return o.ListDevices(ctx, w, func() (kit.Inventory, error) {
		client, err := kit.KubeClient(o.Kubeconfig, fabric.DriverName)
		if err != nil {
			return nil, err
		}
		return inventory(ctx, o, client)
	})
}

// newControllerCommand is `fabric controller`: it publishes the pools.
func newControllerCommand() *cobra.Command {
	var poolsFile, kubeconfig string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "publish the enclosures' pools of network-attached GPUs, once for every node that reaches them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if poolsFile == "" {
				return fmt.Errorf("%s is required", env.Flag("pools"))
			}
			pools, err := fabric.ReadPools(poolsFile)
			if err != nil {
				return fmt.Errorf("%s: %w", env.Flag("pools"), err)
			}
			client, err := kit.KubeClient(kubeconfig, fabric.DriverName+"-controller")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := fabric.Publish(ctx, client, pools)
			if err != nil {
				return err
			}
			klog.FromContext(ctx).Info("Publishing network-attached GPUs", "pools", len(pools))
			<-ctx.Done()
			c.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&poolsFile, "pools", "", "the file of the enclosures' pools, a JSON list (required)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	env.Document(f)
	return cmd
}
