// Package status holds what a lab says about itself: its phase, its
// nodes' processes and readiness, what Up did. lab returns these types;
// its backends fill them.
package status

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
