package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/lab"
)

// newGPUCommand fails and heals GPUs of a lab, as mage gpu:fail and
// gpu:heal do: the lab is $DRALAB_LAB, else the only one (state in
// $DRALAB_STATE_DIR or ~/.local/state/dralab).
func newGPUCommand() *cobra.Command {
	g := &cobra.Command{Use: "gpu", Short: "Fail and heal the lab's GPUs, as a GPU that reports an XID error does"}
	g.AddCommand(&cobra.Command{
		Use:   "fail <node>/<device> [xid]",
		Short: fmt.Sprintf("Fail a GPU with an XID (default %d: fallen off the bus): its driver reports it Unhealthy and taints it", gpu.DefaultXID),
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := lab.ParseGPURef(args[0])
			if err != nil {
				return err
			}
			xid := gpu.DefaultXID
			if len(args) == 2 {
				if xid, err = strconv.Atoi(args[1]); err != nil {
					return fmt.Errorf("XID %q: want a number, e.g. 79 or 48", args[1])
				}
			}
			l, err := lab.Existing()
			if err != nil {
				return err
			}
			x, err := l.FailGPU(cmd.Context(), ref, xid)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s failed with XID %d (%s)\n", ref, x.Code, x.Description)
			return nil
		},
	})
	g.AddCommand(&cobra.Command{
		Use:   "heal <node>/<device>",
		Short: "Heal a failed GPU: its taint is removed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := lab.ParseGPURef(args[0])
			if err != nil {
				return err
			}
			l, err := lab.Existing()
			if err != nil {
				return err
			}
			if err := l.HealGPU(cmd.Context(), ref); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s healed\n", ref)
			return nil
		},
	})
	return g
}
