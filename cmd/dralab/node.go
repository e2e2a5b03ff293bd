package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/kubernetes/pkg/util/taints"

	"github.com/dralab/dralab/internal/hollownode"
	"github.com/dralab/dralab/internal/labstate"
)

func newNodeCommand() *cobra.Command {
	var (
		o        hollownode.Options
		stateDir string
		labels   []string
		// taintSpecs are --taint's, key=value:Effect.
		taintSpecs []string
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run one hollow lab node (started by the lab process)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Dir = labstate.Dir(stateDir).Node(o.Name)
			o.Labels = map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok {
					return fmt.Errorf("--label %q: want key=value", l)
				}
				o.Labels[k] = v
			}
			add, _, err := taints.ParseTaints(taintSpecs)
			if err != nil {
				return fmt.Errorf("--taint: %w", err)
			}
			o.Taints = add
			return hollownode.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "", "the lab's state directory")
	f.StringVar(&o.Name, "name", "", "the node's name")
	f.IntVar(&o.Port, "port", 0, "the kubelet's HTTPS port on 127.0.0.1")
	f.StringVar(&o.CACert, "ca-cert", "", "CA certificate that verifies the kubelet's clients")
	f.StringArrayVar(&labels, "label", nil, "a node label, key=value (repeatable)")
	f.StringArrayVar(&taintSpecs, "taint", nil, "a taint the node registers with, key=value:Effect (repeatable)")
	f.Float32Var(&o.QPS, "kube-api-qps", 50, "QPS of the kubelet's API client")
	f.IntVar(&o.Burst, "kube-api-burst", 100, "burst of the kubelet's API client")
	f.IntVar(&o.CPUs, "cpus", 0, "the node's logical CPUs (0: kubemark's 1)")
	f.Int64Var(&o.Memory, "memory", 0, "the node's memory in bytes (0: kubemark's 3840Mi)")
	f.Var(cliflag.NewMapStringBool(&o.FeatureGates), "feature-gates", "feature gates, A=true,B=false, as the control plane has them")
	for _, name := range []string{"state-dir", "name", "port", "ca-cert"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
