// Command dralab-driver is dralab's drivers on their own: the binary a
// cluster's DaemonSets run. `dralab-driver` is the GPU driver,
// `dralab-driver nic` the NIC driver, `dralab-driver cpu` the CPU driver:
// the GPU driver's command with every other kind of device's under it, as
// internal/nodedrivers lists them.
// --help documents every flag and its environment-variable twin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dralab/dralab/drivers/gpuapp"
	"github.com/dralab/dralab/internal/nodedrivers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cmd := gpuapp.NewCommand()
	cmd.AddCommand(nodedrivers.Commands()...)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "dralab-driver:", err)
		stop()
		os.Exit(1)
	}
}
