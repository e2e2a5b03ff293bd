// Command dralab is the lab's one large binary: the embedded lab process
// (control plane), its hollow nodes and the real kubelet of a real node are
// subcommands, so that one link serves them all. The GPU driver is its own small binary, cmd/dralab-driver, the
// same one a cluster runs as a DaemonSet.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/grpclog"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	// The real kubelet parses its own flags, exactly as the kubelet binary.
	if len(os.Args) > 1 && os.Args[1] == "kubelet" {
		os.Args = os.Args[1:]
		os.Exit(cli.Run(kubeletapp.NewKubeletCommand(context.Background())))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "dralab:", err)
		stop()
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "dralab",
		Short:         "dralab runs a Kubernetes DRA lab: control plane, nodes and GPU drivers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := goflag.NewFlagSet("klog", goflag.ExitOnError)
	klog.InitFlags(klogFlags)
	// One line per message even when logging to a file.
	_ = klogFlags.Set("one_output", "true")
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("vmodule"))
	// gRPC's own logger repeats what the components already log.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))

	root.AddCommand(newLabCommand(), newNodeCommand(), newGPUCommand())
	return root
}
