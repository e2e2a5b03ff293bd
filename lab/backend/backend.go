// Package backend is the interface every lab backend implements (embedded,
// kind) and the status it reports.
package backend

import (
	"context"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
)

// Backend runs labs of one kind.
type Backend interface {
	// Name is the backend's name in configs and messages.
	Name() string
	// Capabilities say what labs of this backend can do.
	Capabilities() Capabilities
	// Up creates the lab, or reuses a running lab with the same
	// configuration, and returns once every node is Ready.
	Up(ctx context.Context, cfg *config.Config, progress ui.Progress) (UpResult, error)
	// Down stops every process of the lab and removes its state.
	Down(ctx context.Context, name string) error
	// Status tells whether the lab runs, and how its nodes are.
	Status(ctx context.Context, name string) (*Status, error)
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

// UpResult says what Up did.
type UpResult struct {
	// Reused is true when a running lab with the same configuration was kept.
	Reused bool
	// Resumed is true when a lab whose process had ended (killed, or its
	// machine restarted) was started again on its own state: its etcd
	// data, its nodes' and drivers' checkpoints.
	Resumed bool
}

// Phase of a lab.
type Phase string

// Phases.
const (
	PhaseAbsent   Phase = "Absent"
	PhaseStarting Phase = "Starting"
	PhaseRunning  Phase = "Running"
	PhaseDegraded Phase = "Degraded"
	PhaseFailed   Phase = "Failed"
	PhaseStopping Phase = "Stopping"
)

// Status of a lab.
type Status struct {
	Name      string
	Backend   string
	Phase     Phase
	Message   string
	APIServer string
	// PID is the lab process's, for the embedded backend.
	PID        int
	Kubeconfig string
	StateDir   string
	Nodes      []NodeStatus
}

// NodeStatus is one node's state.
type NodeStatus struct {
	Name string
	// Process and Driver say whether the node's process and its GPU
	// driver's run, for the embedded backend.
	Process string
	Driver  string
	// PID and DriverPID are the processes' IDs, 0 when not running.
	PID, DriverPID int
	// Healthy: every process of the node runs (or is still starting).
	Healthy bool
	// Ready is the node's Ready condition as the API server has it, or
	// "Unknown" when the API cannot be reached.
	Ready string
	// Profile is the node's GPU profile, if any.
	Profile string
	// Host paths a kubelet plugin on this node uses, where the backend
	// shares them with the host (embedded): the kubelet's plugin
	// registration directory, the parent of plugins' socket directories,
	// and the CDI spec directory the node's runtime reads.
	RegistrarDir string
	PluginsDir   string
	CDIDir       string
}
