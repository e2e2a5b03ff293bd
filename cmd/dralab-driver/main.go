// Command dralab-driver is dralab's GPU driver on its own: the binary a
// cluster's DaemonSet runs. `dralab-driver --help` documents every flag and
// its environment-variable twin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dralab/dralab/drivers/gpuapp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := gpuapp.NewCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "dralab-driver:", err)
		stop()
		os.Exit(1)
	}
}
