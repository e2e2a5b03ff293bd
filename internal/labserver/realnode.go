package labserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/controlplane"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
)

// startRealNode starts containerd, imports the node's images, and starts
// the real kubelet. The node's GPU driver starts with the others, once the
// control plane is up.
func startRealNode(ctx context.Context, procs *supervisor, o Options, n config.Node, caCert string) error {
	p := realnode.Paths{Node: o.Dir.Node(n.Name)}
	if err := os.MkdirAll(string(p.Node), 0o750); err != nil {
		return err
	}
	chains := realnode.IptablesChains(ctx)
	if err := os.WriteFile(p.ChainsBefore(), []byte(strings.Join(chains, "\n")), 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	if err := realnode.WriteFiles(realnode.Config{Paths: p, CACert: caCert, KubeletPort: port, Snapshotter: "overlayfs"}); err != nil {
		return err
	}
	binDir := filepath.Dir(o.Executable)
	cd := realnode.ContainerdCommand(binDir, p)
	if err := procs.startProcess(ctx, &process{role: labstate.RoleContainerd, node: n.Name, bin: cd.Path, args: cd.Args[1:], env: cd.Env}); err != nil {
		return err
	}
	if err := realnode.WaitContainerd(ctx, p); err != nil {
		return err
	}
	if err := realnode.ImportImages(ctx, binDir, p); err != nil {
		return err
	}
	args := realnode.KubeletArgs(p, n.Name, o.Dir.Node(n.Name).Kubeconfig(), nodeLabels(n), o.Verbosity)
	return procs.start(ctx, labstate.RoleNode, n.Name, args, false)
}

// shutdown stops the lab's processes in order: drivers, kubelets, the
// control plane (so that drivers and kubelets stop against a live API
// server); then, on
// a real node, the pods through the CRI while containerd still runs (which
// tears down their networks), containerd, and what is left on the host.
func shutdown(ctx context.Context, procs *supervisor, dir labstate.Dir, cfg *config.Config, cp *controlplane.ControlPlane) {
	logger := klog.FromContext(ctx)
	const grace = 10 * time.Second
	bg := context.WithoutCancel(ctx)
	procs.stop(bg, grace, labstate.RoleDriver)
	procs.stop(bg, grace, labstate.RoleNode)
	logger.Info("Stopped the lab's drivers and nodes")
	if cp != nil {
		cp.Stop()
		logger.Info("Stopped the control plane")
	}
	for _, n := range cfg.Nodes {
		if n.Kind != config.NodeReal {
			continue
		}
		p := realnode.Paths{Node: dir.Node(n.Name)}
		rctx, cancel := context.WithTimeout(bg, 30*time.Second)
		if err := realnode.RemovePods(rctx, p); err != nil {
			logger.Error(err, "Removing the real node's pods", "node", n.Name)
		}
		cancel()
	}
	procs.stop(bg, grace, labstate.RoleContainerd)
	if err := CleanupHost(bg, dir, cfg); err != nil {
		logger.Error(err, "Cleaning up the host")
	}
}

// CleanupHost undoes what real nodes did to the host; lab:down runs it too
// (`dralab lab cleanup`), for a lab process that was killed.
func CleanupHost(ctx context.Context, dir labstate.Dir, cfg *config.Config) error {
	for _, n := range cfg.Nodes {
		if n.Kind != config.NodeReal {
			continue
		}
		p := realnode.Paths{Node: dir.Node(n.Name)}
		data, _ := os.ReadFile(p.ChainsBefore())
		if err := realnode.Cleanup(ctx, p, strings.Split(string(data), "\n")); err != nil {
			return err
		}
	}
	return nil
}
