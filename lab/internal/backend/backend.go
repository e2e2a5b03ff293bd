// Package backend is the interface every lab backend implements (embedded,
// kind) and the status it reports.
package backend

import (
	"context"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// Backend runs labs of one kind.
type Backend interface {
	// Name is the backend's name in configs and messages.
	Name() string
	// Capabilities say what labs of this backend can do.
	Capabilities() Capabilities
	// Up creates the lab, or reuses a running lab with the same
	// configuration, and returns once every node is Ready.
	Up(ctx context.Context, cfg *config.Config, progress ui.Progress) (status.UpResult, error)
	// Down stops every process of the lab and removes its state.
	Down(ctx context.Context, name string) error
	// Status tells whether the lab runs, and how its nodes are.
	Status(ctx context.Context, name string) (*status.Status, error)
	// Kubeconfig is the path of the lab's administrator kubeconfig.
	Kubeconfig(name string) string
	// CollectLogs copies the lab's logs into dir.
	CollectLogs(ctx context.Context, name, dir string) error
}

// GPUFaulter is a backend whose labs' GPU drivers take injected faults.
type GPUFaulter interface {
	// UpdateGPUFaults reads the GPU faults of a node of lab name, has
	// update change them, and writes them where the node's driver watches.
	UpdateGPUFaults(ctx context.Context, name, node string, update func(map[string]gpu.GPUFault)) error
}

// PodResourcer is a backend whose nodes' kubelets serve the podresources
// API on a socket of the host.
type PodResourcer interface {
	// PodResourcesSocket is the podresources socket of a node of lab name.
	PodResourcesSocket(name, node string) (string, error)
}

// DriverRestarter is a backend that restarts a node's driver the way a
// crashed plugin is restarted by its DaemonSet.
type DriverRestarter interface {
	// RestartDriver kills the driver process of a role (nodedrivers.Kind.
	// Role) on a node of lab name, and waits until the lab has started it
	// again.
	RestartDriver(ctx context.Context, name, role, node string) error
}

// DriverMetricser is a backend that records where its labs' drivers serve
// their metrics.
type DriverMetricser interface {
	// DriverMetrics are the metrics addresses (host:port) of the drivers of
	// a node of lab name, by driver name; those it does not run are absent.
	DriverMetrics(name, node string) (map[string]string, error)
}

// Dashboarder is a backend whose labs serve the live dashboard.
type Dashboarder interface {
	// DashboardURL is the dashboard's URL, its token included.
	DashboardURL(name string) (string, error)
}

// Capabilities describe a backend.
type Capabilities struct {
	// HollowNodes: nodes run the real kubelet with a fake container runtime.
	HollowNodes bool
	// RealNodes: nodes run real containers.
	RealNodes bool
	// NeedsDocker: the backend needs a Docker engine.
	NeedsDocker bool
}
