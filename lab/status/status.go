// Package status holds what a lab says about itself: its phase, its
// nodes' processes and readiness, what Up did. lab returns these types;
// its backends fill them.
package status

import (
	"fmt"
	"io"
	"text/tabwriter"
)

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
	// FeatureGates and RuntimeConfig are what the lab's configuration
	// switches, as the components take them ("A=true,B=false").
	FeatureGates  string
	RuntimeConfig string
	Nodes         []NodeStatus
	// Processes are the processes the lab started on this host and
	// recorded, the lab process first (embedded backend; none for a lab
	// whose process is not running).
	Processes []Process
	// HostLinks are the files the lab made outside its state directory
	// (its nodes' short links), which Down removes with it.
	HostLinks []string
}

// Roles of the processes a lab records: the lab process, a node's kubelet,
// a real node's containerd and a node's main driver (dralab's GPU driver
// or an outside driver). A driver beside the main one has the role of its
// kind (the NIC driver's "nic-driver", the CPU driver's "cpu-driver").
const (
	RoleLab        = "lab"
	RoleNode       = "node"
	RoleContainerd = "containerd"
	RoleDriver     = "driver"
)

// Process is a process a lab started on this host, as the lab recorded it
// when it started it. PID, StartTime and BootID together are that very
// process: a PID alone may since belong to another program, which a
// caller must leave alone.
type Process struct {
	// Role is one of the Role constants, or a side driver's role.
	Role string
	// Node names the node the process serves; empty for the lab process.
	Node string
	PID  int
	// StartTime is the process's start in clock ticks since boot (Linux),
	// BootID the kernel's boot then.
	StartTime uint64
	BootID    string
	// Running: the lab counts the process as running (the lab process
	// restarts a node's process that ended on its own).
	Running bool
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
	// ClusterNode is the node's name in the cluster (a kind node's
	// container); empty: its name in the lab.
	ClusterNode string
	// Profile is the node's GPU profile, if any.
	Profile string
	// GPUHealth is the health of the node's whole GPUs as dralab's GPU
	// driver publishes it ("7 healthy, 1 failed (Xid 79)"); empty where
	// the node publishes none or the API does not answer.
	GPUHealth string
	// Host paths a kubelet plugin on this node uses, where the backend
	// shares them with the host (embedded): the kubelet's plugin
	// registration directory, the parent of plugins' socket directories,
	// and the CDI spec directory the node's runtime reads.
	RegistrarDir string
	PluginsDir   string
	CDIDir       string
	// DevicePluginsDir is where the node's kubelet serves device plugins
	// (embedded backend), its device-manager checkpoint beside their
	// sockets.
	DevicePluginsDir string
	// CheckpointDir is the directory of the node's main driver's
	// checkpoint (embedded backend): what it prepared, for whom.
	CheckpointDir string
}

// Write prints the status as lab:status shows it: the lab, then a table
// of its nodes.
func (s *Status) Write(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Lab:\t%s (%s backend)\n", s.Name, s.Backend)
	fmt.Fprintf(w, "Phase:\t%s\n", s.Phase)
	if s.Message != "" {
		fmt.Fprintf(w, "Message:\t%s\n", s.Message)
	}
	if s.PID != 0 {
		fmt.Fprintf(w, "Process:\t%d\n", s.PID)
	}
	if s.APIServer != "" {
		fmt.Fprintf(w, "API server:\t%s\n", s.APIServer)
		fmt.Fprintf(w, "Kubeconfig:\t%s\n", s.Kubeconfig)
	}
	fmt.Fprintf(w, "State:\t%s\n", s.StateDir)
	if s.FeatureGates != "" {
		fmt.Fprintf(w, "Feature gates:\t%s\n", s.FeatureGates)
	}
	if s.RuntimeConfig != "" {
		fmt.Fprintf(w, "Runtime config:\t%s\n", s.RuntimeConfig)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(s.Nodes) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	return s.WriteNodes(out)
}

// WriteNodes prints the table of the lab's nodes: name, readiness, process,
// GPUs, their health and driver.
func (s *Status) WriteNodes(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tREADY\tPROCESS\tGPUS\tHEALTH\tDRIVER")
	for _, n := range s.Nodes {
		gpus, health, driver := n.Profile, n.GPUHealth, n.Driver
		if gpus == "" {
			gpus, driver = "-", "-"
		}
		if health == "" {
			health = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Ready, n.Process, gpus, health, driver)
	}
	return w.Flush()
}
