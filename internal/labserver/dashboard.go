package labserver

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// startDashboard serves the lab's live dashboard on a loopback port, with a
// random token, until ctx ends, and records its URL in the state
// directory, readable by the lab's owner only. The dashboard only reads
// the cluster.
func startDashboard(ctx context.Context, dir labstate.Dir, cfg *config.Config) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("dashboard"))
	url, err := dashboard.Serve(ctx, dir.Kubeconfig(), "dralab: "+cfg.Name)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Dashboard serving", "file", dir.DashboardURL())
	return atomicfile.Write(dir.DashboardURL(), []byte(url+"\n"), 0o600)
}
