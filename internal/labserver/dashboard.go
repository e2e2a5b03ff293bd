package labserver

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// startDashboard serves the lab's live dashboard on a loopback port, with a
// random token, until ctx ends, and records its URL in the state
// directory, readable by the lab's owner only. The dashboard only reads
// the cluster. Its metrics panel reads what lab:metrics prints.
func startDashboard(ctx context.Context, dir labstate.Dir, cfg *config.Config) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("dashboard"))
	nodes := make([]string, 0, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		nodes = append(nodes, n.Name)
	}
	metrics := func(ctx context.Context) (*drametrics.Snapshot, error) {
		return drametrics.Read(ctx, dir.Kubeconfig(), nodes, func(node string) (map[string]string, error) {
			return nodedrivers.MetricsAddresses(dir.Node(node))
		})
	}
	url, err := dashboard.Serve(ctx, dir.Kubeconfig(), "dralab: "+cfg.Name, metrics)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Dashboard serving", "file", dir.DashboardURL())
	return atomicfile.Write(dir.DashboardURL(), []byte(url+"\n"), 0o600)
}
