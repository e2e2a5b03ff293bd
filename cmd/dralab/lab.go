package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/dralab/dralab/internal/controlplane"
	"github.com/dralab/dralab/internal/controlplane/options"
	"github.com/dralab/dralab/internal/labserver"
	"github.com/dralab/dralab/internal/labstate"
)

// envCPUProfile names a file for the lab process's CPU profile, written
// when the lab stops: what docs/performance.md reads to tune the lab.
const envCPUProfile = "DRALAB_CPU_PROFILE"

func startCPUProfile(file string) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envCPUProfile, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", envCPUProfile, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// startControlPlane starts the lab's control plane in this process.
func startControlPlane(ctx context.Context, o options.Options) (labserver.ControlPlane, error) {
	cp, err := controlplane.Start(ctx, o)
	if err != nil {
		return nil, err // not a typed nil
	}
	return cp, nil
}

func newLabCommand() *cobra.Command {
	lab := &cobra.Command{Use: "lab", Short: "Embedded lab processes"}
	var stateDir string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the embedded lab in the foreground (lab:up starts it detached)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			v, _ := strconv.Atoi(cmd.Flags().Lookup("v").Value.String())
			if file := os.Getenv(envCPUProfile); file != "" {
				stop, err := startCPUProfile(file)
				if err != nil {
					return err
				}
				defer stop()
			}
			return labserver.Run(cmd.Context(), labserver.Options{
				Dir:               labstate.Dir(stateDir),
				Executable:        exe,
				Verbosity:         v,
				StartControlPlane: startControlPlane,
			})
		},
	}
	serve.Flags().StringVar(&stateDir, "state-dir", "", "the lab's state directory, holding config.json")
	_ = serve.MarkFlagRequired("state-dir")
	lab.AddCommand(serve)

	var cleanupDir string
	cleanup := &cobra.Command{
		Use:   "cleanup",
		Short: "Undo what a lab's real node did to the host (lab:down runs it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labserver.CleanupHost(cmd.Context(), labstate.Dir(cleanupDir))
		},
	}
	cleanup.Flags().StringVar(&cleanupDir, "state-dir", "", "the lab's state directory")
	_ = cleanup.MarkFlagRequired("state-dir")
	lab.AddCommand(cleanup)
	return lab
}
