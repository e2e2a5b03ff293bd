// Package labstate is the layout of an embedded lab's state directory and
// the status file through which the detached lab process reports to the
// commands that started or query it.
package labstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dralab/dralab/internal/atomicfile"
)

// Dir is a lab's state directory.
type Dir string

// Root returns the default parent of labs' state directories:
// $DRALAB_STATE_DIR, else $XDG_STATE_HOME/dralab, else ~/.local/state/dralab.
func Root() (string, error) {
	if d := os.Getenv("DRALAB_STATE_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "dralab"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "dralab"), nil
}

func (d Dir) path(elem ...string) string {
	return filepath.Join(append([]string{string(d)}, elem...)...)
}

// Config is the lab configuration the lab was started with.
func (d Dir) Config() string { return d.path("config.json") }

// PKI holds the CA, certificates and keys.
func (d Dir) PKI() string { return d.path("pki") }

// Kubeconfig is the administrator's kubeconfig (mode 0600).
func (d Dir) Kubeconfig() string { return d.path("kubeconfig") }

// ComponentKubeconfig is the kubeconfig of a control-plane component.
func (d Dir) ComponentKubeconfig(component string) string {
	return d.path("kubeconfigs", component+".kubeconfig")
}

// Etcd is etcd's data directory.
func (d Dir) Etcd() string { return d.path("etcd") }

// Logs holds one log file per process and component.
func (d Dir) Logs() string { return d.path("logs") }

// Log is the log file of a component ("lab", "etcd", "node-<name>").
func (d Dir) Log(component string) string { return d.path("logs", component+".log") }

// PIDFile holds the lab process's PID.
func (d Dir) PIDFile() string { return d.path("lab.pid") }

// StatusFile is written by the lab process as it starts, runs and stops.
func (d Dir) StatusFile() string { return d.path("status.json") }

// AuditPolicy is the API server's audit policy.
func (d Dir) AuditPolicy() string { return d.path("audit-policy.yaml") }

// AuditLog is the API server's audit log: one JSON event a line, for the
// requests of drivers and workload service accounts (see AuditPolicy).
func (d Dir) AuditLog() string { return d.Log("audit") }

// SchedulerConfig is the scheduler's configuration file.
func (d Dir) SchedulerConfig() string { return d.path("kube-scheduler.yaml") }

// Node is the state of one node.
func (d Dir) Node(name string) NodeDir { return NodeDir(d.path("nodes", name)) }

// NodeDir is a node's directory: the kubelet's root and everything a DRA
// driver on that node shares with the kubelet and the container runtime.
type NodeDir string

func (n NodeDir) path(elem ...string) string {
	return filepath.Join(append([]string{string(n)}, elem...)...)
}

// KubeletRoot is the kubelet's --root-dir.
func (n NodeDir) KubeletRoot() string { return n.path("kubelet") }

// PluginsRegistry is where kubelet plugins put their registration sockets.
func (n NodeDir) PluginsRegistry() string { return n.path("kubelet", "plugins_registry") }

// Plugins is the parent of kubelet plugins' own socket directories.
func (n NodeDir) Plugins() string { return n.path("kubelet", "plugins") }

// CDI is the node's CDI spec directory, read by its container runtime.
func (n NodeDir) CDI() string { return n.path("cdi") }

// Kubeconfig is the node's kubelet kubeconfig.
func (n NodeDir) Kubeconfig() string { return n.path("kubelet.kubeconfig") }

// DriverKubeconfig is the kubeconfig of the node's DRA driver: the node's
// identity (the Node authorizer lets it write the node's ResourceSlices)
// in the group DriverGroup too, to which the lab grants reading any claim,
// as a driver DaemonSet's ServiceAccount has.
func (n NodeDir) DriverKubeconfig() string { return n.path("driver.kubeconfig") }

// DriverGroup is the group of the lab's DRA drivers.
const DriverGroup = "dralab:drivers"

// CertDir is the kubelet's --cert-dir.
func (n NodeDir) CertDir() string { return n.path("pki") }

// DevicePlugins is the kubelet's device-plugin directory.
func (n NodeDir) DevicePlugins() string { return n.path("kubelet", "device-plugins") }

// DriverCheckpoint is the directory of the GPU driver's checkpoint.
func (n NodeDir) DriverCheckpoint() string { return n.path("driver") }

// CRISocket is the node's container runtime endpoint.
func (n NodeDir) CRISocket() string { return n.path("cri.sock") }

// Phases of a lab process.
const (
	PhaseStarting = "Starting"
	PhaseRunning  = "Running"
	PhaseFailed   = "Failed"
	PhaseStopping = "Stopping"
)

// Status is what the lab process reports about itself.
type Status struct {
	Phase      string          `json:"phase"`
	Message    string          `json:"message,omitempty"`
	PID        int             `json:"pid"`
	ConfigHash string          `json:"configHash"`
	APIServer  string          `json:"apiServer,omitempty"`
	StartedAt  time.Time       `json:"startedAt"`
	Processes  []ProcessStatus `json:"processes,omitempty"`
}

// Process roles.
const (
	RoleNode   = "node"
	RoleDriver = "driver"
	// RoleContainerd is the container runtime of a real node.
	RoleContainerd = "containerd"
)

// ProcessStatus is the state of one child process of the lab.
type ProcessStatus struct {
	// Role is "node" or "driver"; Node names the node either serves.
	Role    string `json:"role"`
	Node    string `json:"node"`
	PID     int    `json:"pid,omitempty"`
	Running bool   `json:"running"`
	// Restarts counts restarts after the process ended on its own.
	Restarts int `json:"restarts,omitempty"`
	// Exit says how the process last ended, when it did.
	Exit string `json:"exit,omitempty"`
}

// Process returns the status of a node's process of a role.
func (s *Status) Process(role, node string) (ProcessStatus, bool) {
	for _, p := range s.Processes {
		if p.Role == role && p.Node == node {
			return p, true
		}
	}
	return ProcessStatus{}, false
}

// WriteStatus replaces the status file atomically.
func (d Dir) WriteStatus(s *Status) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(d.StatusFile(), data, 0o644)
}

// ReadStatus reads the status file; os.ErrNotExist when there is none.
func (d Dir) ReadStatus() (*Status, error) {
	data, err := os.ReadFile(d.StatusFile())
	if err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.StatusFile(), err)
	}
	return &s, nil
}

// ReadPID returns the PID in the PID file; os.ErrNotExist when there is none.
func (d Dir) ReadPID() (int, error) {
	data, err := os.ReadFile(d.PIDFile())
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s holds %q, not a process ID", d.PIDFile(), strings.TrimSpace(string(data)))
	}
	return pid, nil
}

// ErrLocked means another lab process owns the state directory.
var ErrLocked = errors.New("state directory is in use by another lab process")

// ClaimPID writes the current process's PID file, failing with ErrLocked
// when a live process already holds it.
func (d Dir) ClaimPID() error {
	if pid, err := d.ReadPID(); err == nil && pid != os.Getpid() && Alive(pid) {
		return fmt.Errorf("%w (pid %d)", ErrLocked, pid)
	}
	return atomicfile.Write(d.PIDFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// Alive reports whether a process with that PID exists and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
