package labserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
)

// startRealNode starts containerd, imports the node's images, and starts
// the real kubelet. The node's GPU driver starts with the others, once the
// control plane is up.
func startRealNode(ctx context.Context, procs *supervisor, o Options, cfg *config.Config, n config.Node, caCert, gates string) error {
	p := realnode.Paths{Node: o.Dir.Node(n.Name)}
	if err := os.MkdirAll(string(p.Node), 0o750); err != nil {
		return err
	}
	rec, err := realnode.PrepareHost(ctx, p, o.Dir.Name())
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	files := realnode.Config{Paths: p, CACert: caCert, KubeletPort: port, Snapshotter: "overlayfs", CgroupRoot: rec.CgroupRoot}
	if err := realnode.WriteFiles(files); err != nil {
		return err
	}
	binDir := filepath.Dir(o.Executable)
	cd := realnode.ContainerdCommand(binDir, p)
	if err := procs.startProcess(ctx, &process{role: labstate.RoleContainerd, node: n.Name, bin: cd.Path, args: cd.Args[1:], env: cd.Env, restart: true}); err != nil {
		return err
	}
	if err := realnode.WaitContainerd(ctx, p); err != nil {
		return err
	}
	if err := realnode.ImportImages(ctx, binDir, p); err != nil {
		return err
	}
	args := realnode.KubeletArgs(p, n.Name, o.Dir.Node(n.Name).Kubeconfig(), nodedrivers.Labels(cfg, n), n.TaintStrings(), gates, o.Verbosity)
	rebind := func() ([]string, []string, error) {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		files.KubeletPort = port
		return args, nil, realnode.WriteKubeletConfig(files)
	}
	if err := procs.startProcess(ctx, &process{role: labstate.RoleNode, node: n.Name, args: args, rebind: rebind, restart: true}); err != nil {
		return err
	}
	go recordHost(ctx, o.Dir, n.Name, rec)
	return nil
}

// recordHost records what the real kubelet created on the host (its
// iptables chains, its fixed host paths) once its node is Ready: it has
// made them by then, and anything that appears later is not the lab's.
func recordHost(ctx context.Context, dir labstate.Dir, node string, rec *realnode.HostRecord) {
	logger := klog.FromContext(ctx)
	client, err := kubeclient.New(dir.Kubeconfig())
	if err == nil {
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
	}
	if err == nil {
		err = rec.RecordStarted(ctx, realnode.Paths{Node: dir.Node(node)})
	}
	if err != nil {
		logger.Error(err, "Recording what the real node created on the host", "node", node)
		return
	}
	logger.V(1).Info("Recorded what the real node created on the host", "node", node, "chains", rec.ChainsCreated, "paths", rec.PathsCreated)
}

// CleanupHost undoes what real nodes did to the host, from their host
// records alone (no configuration needed); lab:down runs it too (`dralab
// lab cleanup`), for a lab process that was killed.
func CleanupHost(ctx context.Context, dir labstate.Dir) error {
	nodes, err := realnode.NodesWithHostRecords(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range nodes {
		if err := realnode.Cleanup(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("real node %s left things on the host: %w", filepath.Base(string(p.Node)), err))
		}
	}
	return errors.Join(errs...)
}
