// Package labstate is the layout of an embedded lab's state directory and
// the status file through which the detached lab process reports to the
// commands that started or query it.
package labstate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/lab/status"
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

// Name is the lab's name: its directory's.
func (d Dir) Name() string { return filepath.Base(string(d)) }

func (d Dir) path(elem ...string) string {
	return filepath.Join(append([]string{string(d)}, elem...)...)
}

// Config is the lab configuration the lab was started with.
func (d Dir) Config() string { return d.path("config.json") }

// PKI holds the CA, certificates and keys.
func (d Dir) PKI() string { return d.path("pki") }

// Kubeconfig is the administrator's kubeconfig (mode 0600).
func (d Dir) Kubeconfig() string { return d.path("kubeconfig") }

// DashboardURL holds the URL of the lab's dashboard, its token included:
// readable by the lab's owner only.
func (d Dir) DashboardURL() string { return d.path("dashboard-url") }

// ComponentKubeconfig is the kubeconfig of a control-plane component.
func (d Dir) ComponentKubeconfig(component string) string {
	return d.path("kubeconfigs", component+".kubeconfig")
}

// Etcd is etcd's data directory.
func (d Dir) Etcd() string { return d.path("etcd") }

// EtcdSocket is the unix socket etcd serves the API server on, inside the
// lab's 0700 state directory.
func (d Dir) EtcdSocket() string { return d.path("etcd.sock") }

// OwnerFile records the process that owns a lab started by a test: the
// lab deletes itself when that process ends.
func (d Dir) OwnerFile() string { return d.path("owner.json") }

// Logs holds one log file per process and component.
func (d Dir) Logs() string { return d.path("logs") }

// Log is the log file of a component ("lab", "etcd", "node-<name>").
func (d Dir) Log(component string) string { return d.path("logs", component+".log") }

// PIDFile holds the lab process's PID.
func (d Dir) PIDFile() string { return d.path("lab.pid") }

// ContextName is the kubeconfig context (and cluster, and user) of lab
// name's kubeconfigs, "dralab-<name>" as kind's are "kind-<name>": two labs'
// kubeconfigs merge without collision.
func ContextName(lab string) string { return "dralab-" + lab }

// LockFile is locked by the lab process for as long as it runs.
func (d Dir) LockFile() string { return d.path("lab.lock") }

// LabOf tells whether a kubeconfig file pointing at server is a lab's
// own: the administrator kubeconfig in a lab's state directory, whose
// status names the same API server. It returns the directory. The suites
// that create and delete objects (target.Request.Lab) run on such a lab
// without consent; a copy of the file elsewhere, or a lab since restarted
// on another port, needs consent.
func LabOf(kubeconfig, server string) (string, bool) {
	dir := Dir(filepath.Dir(kubeconfig))
	if dir.Kubeconfig() != kubeconfig {
		return "", false
	}
	st, err := dir.ReadStatus()
	if errors.Is(err, os.ErrNotExist) && recordedBackend(dir) == "kind" {
		// A kind lab keeps no status file: kind wrote the kubeconfig into
		// the directory of the lab whose recorded configuration names the
		// kind backend, and lab:down removes both.
		return string(dir), true
	}
	if err != nil || st.APIServer == "" || st.APIServer != server {
		return "", false
	}
	return string(dir), true
}

// recordedBackend is the backend a lab's recorded configuration
// (config.json) names; "" where there is none.
func recordedBackend(dir Dir) string {
	var cfg struct {
		Backend string `json:"backend"`
	}
	data, err := os.ReadFile(dir.path("config.json"))
	if err != nil || json.Unmarshal(data, &cfg) != nil {
		return ""
	}
	return cfg.Backend
}

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

// KubeletDir is the kubelet's directory in the node's state.
func (n NodeDir) KubeletDir() string { return n.path("kubelet") }

// KubeletRoot is the kubelet's --root-dir: a short link to KubeletDir (see
// ShortLink), so that the plugin sockets under it fit a unix socket path
// however deep the state directory is.
func (n NodeDir) KubeletRoot() string { return n.ShortLink() }

// ShortLink is the short path of the node's kubelet directory, a symbolic
// link in the temporary directory named after the node directory. A
// kubelet plugin's DRA socket, <root>/plugins/<driver>/dra-<pod UID>.sock,
// must fit in 107 bytes (103 on macOS): under a state directory it would
// not.
func (n NodeDir) ShortLink() string {
	sum := sha256.Sum256([]byte(n))
	return filepath.Join(shortLinkDir(), "dralab-"+hex.EncodeToString(sum[:5]))
}

// shortLinkDir is where the short links go: the temporary directory, but
// on macOS /tmp itself, since its $TMPDIR (/var/folders/…/T/) alone takes
// half of a socket path.
func shortLinkDir() string {
	if runtime.GOOS == "darwin" {
		return "/tmp"
	}
	return os.TempDir()
}

// ErrLinkTaken means a node's short link exists and is not the node's.
var ErrLinkTaken = errors.New("the node's short path is taken")

// Link creates the node's kubelet directory and its short link; a link
// that exists already must be this node's.
func (n NodeDir) Link() error {
	if err := os.MkdirAll(n.KubeletDir(), 0o750); err != nil {
		return err
	}
	link := n.ShortLink()
	if err := os.Symlink(n.KubeletDir(), link); err == nil || !errors.Is(err, os.ErrExist) {
		return err
	}
	if !n.ownsLink() {
		return fmt.Errorf("%w: %s exists and does not point at %s; remove it if no lab uses it", ErrLinkTaken, link, n.KubeletDir())
	}
	return nil
}

// Unlink removes the node's short link, if it is the node's.
func (n NodeDir) Unlink() error {
	if !n.ownsLink() {
		return nil
	}
	if err := os.Remove(n.ShortLink()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the node's short path: %w", err)
	}
	return nil
}

// ownsLink tells whether the short link exists, is a link of this user's,
// and points at the node's kubelet directory.
func (n NodeDir) ownsLink() bool {
	info, err := os.Lstat(n.ShortLink())
	if err != nil || info.Mode()&os.ModeSymlink == 0 {
		return false
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return false
	}
	target, err := os.Readlink(n.ShortLink())
	return err == nil && target == n.KubeletDir()
}

// Nodes lists the node directories of the lab's state.
func (d Dir) Nodes() []NodeDir {
	entries, _ := os.ReadDir(d.path("nodes"))
	var out []NodeDir
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, NodeDir(d.path("nodes", e.Name())))
		}
	}
	return out
}

// PluginsRegistry is where kubelet plugins put their registration sockets.
func (n NodeDir) PluginsRegistry() string { return filepath.Join(n.KubeletRoot(), "plugins_registry") }

// Plugins is the parent of kubelet plugins' own socket directories.
func (n NodeDir) Plugins() string { return filepath.Join(n.KubeletRoot(), "plugins") }

// PodResourcesSocket is the kubelet's podresources API socket, which it
// serves under its --root-dir (pod-resources/kubelet.sock), hollow and
// real kubelets alike.
func (n NodeDir) PodResourcesSocket() string {
	return filepath.Join(n.KubeletRoot(), "pod-resources", "kubelet.sock")
}

// CDI is the node's CDI spec directory, read by its container runtime.
func (n NodeDir) CDI() string { return n.path("cdi") }

// Kubeconfig is the node's kubelet kubeconfig.
func (n NodeDir) Kubeconfig() string { return n.path("kubelet.kubeconfig") }

// DriverFiles are the files of one of a node's drivers (the GPU driver,
// an outside driver, the NIC or CPU driver): each has its own
// ServiceAccount token, kubeconfig, checkpoint and metrics address.
type DriverFiles struct {
	// Kubeconfig is the driver's kubeconfig: the token in Token, of the
	// driver's ServiceAccount in DriversNamespace, bound to the node's
	// Node object; the lab grants it what the driver's chart grants in a
	// cluster.
	Kubeconfig string
	// Token is the driver's token, which the lab renews while it runs.
	Token string
	// Checkpoint is the directory of the driver's checkpoint.
	Checkpoint string
	// Metrics holds the address (host:port) where the driver serves its
	// Prometheus metrics, /metrics: its prepare and unprepare calls.
	Metrics string
}

// Driver returns the files of the node's driver of a process role
// (RoleDriver for the node's GPU or outside driver; the others' roles are
// internal/nodedrivers').
func (n NodeDir) Driver(role string) DriverFiles {
	return DriverFiles{
		Kubeconfig: n.path(role + ".kubeconfig"),
		Token:      n.path(role + ".token"),
		Checkpoint: n.path(role),
		Metrics:    n.path(role + "-metrics-address"),
	}
}

// DriversNamespace is the namespace of the lab drivers' ServiceAccounts.
const DriversNamespace = "dralab-drivers"

// FabricPools is the file of the enclosures of network-attached GPUs
// (drivers/fabric) that the node's plugin of them reads.
func (n NodeDir) FabricPools() string { return n.path("fabric-pools.json") }

// CertDir is the kubelet's --cert-dir.
func (n NodeDir) CertDir() string { return n.path("pki") }

// DevicePlugins is the kubelet's device-plugin directory.
func (n NodeDir) DevicePlugins() string { return filepath.Join(n.KubeletRoot(), "device-plugins") }

// GPUFaults is the node's GPU faults file (gpu.Faults): what gpu:fail
// writes and the node's GPU driver watches.
func (n NodeDir) GPUFaults() string { return n.path("gpu-faults.json") }

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
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	// ID is the lab process.
	procid.ID
	ConfigHash string    `json:"configHash"`
	APIServer  string    `json:"apiServer,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	// CameUp says that a lab on this state was Running once: its etcd
	// data holds a lab worth resuming, even after a resume that failed.
	CameUp    bool            `json:"cameUp,omitempty"`
	Processes []ProcessStatus `json:"processes,omitempty"`
}

// Process roles, as lab/status names them. RoleDriver is a node's main
// driver, dralab's GPU driver or an outside driver; the roles of the
// drivers beside it (NIC, CPU) are internal/nodedrivers'.
const (
	RoleNode   = status.RoleNode
	RoleDriver = status.RoleDriver
	// RoleContainerd is the container runtime of a real node.
	RoleContainerd = status.RoleContainerd
)

// ProcessStatus is the state of one child process of the lab.
type ProcessStatus struct {
	// Role is "node" or "driver"; Node names the node either serves.
	Role string `json:"role"`
	Node string `json:"node"`
	// ID is the process as started: only a process that matches it
	// is signalled or counted as running.
	procid.ID
	Running bool `json:"running"`
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
	return parseStatus(d.StatusFile(), data)
}

// parseStatus decodes a status file; source names it in errors.
func parseStatus(source string, data []byte) (*Status, error) {
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", source, err)
	}
	return &s, nil
}

// parseProcessID decodes a PID or owner file; source names it in errors.
func parseProcessID(source string, data []byte) (procid.ID, error) {
	var id procid.ID
	if err := json.Unmarshal(data, &id); err != nil || id.PID <= 0 {
		return procid.ID{}, fmt.Errorf("%s holds %q, not a process identity", source, strings.TrimSpace(string(data)))
	}
	return id, nil
}

// ReadProcess returns the lab process recorded in the PID file;
// os.ErrNotExist when there is none.
func (d Dir) ReadProcess() (procid.ID, error) {
	data, err := os.ReadFile(d.PIDFile())
	if err != nil {
		return procid.ID{}, err
	}
	return parseProcessID(d.PIDFile(), data)
}

// WriteOwner records the process that owns the lab.
func (d Dir) WriteOwner(owner procid.ID) error {
	data, err := json.Marshal(owner)
	if err != nil {
		return err
	}
	return atomicfile.Write(d.OwnerFile(), append(data, '\n'), 0o600)
}

// ReadOwner returns the lab's owner, if it has one.
func (d Dir) ReadOwner() (procid.ID, bool, error) {
	data, err := os.ReadFile(d.OwnerFile())
	if errors.Is(err, os.ErrNotExist) {
		return procid.ID{}, false, nil
	}
	if err != nil {
		return procid.ID{}, false, err
	}
	id, err := parseProcessID(d.OwnerFile(), data)
	if err != nil {
		return procid.ID{}, false, err
	}
	return id, true, nil
}

// ErrLocked means another lab process owns the state directory.
var ErrLocked = errors.New("state directory is in use by another lab process")

// lockGrace is how long a lab process waits for the lock of a lab process
// that has ended: the kernel releases a killed process's lock only once
// its last thread has exited, which, for a lab process of hundreds of
// threads, can be after /proc already shows it a zombie, and after
// procid.WaitGone, which a resume after a kill waits for.
const lockGrace = 10 * time.Second

// lock takes the state directory's lock. While the lab process recorded
// in the PID file is ending (gone, or a zombie), its lock may outlive it
// for a moment: lock waits for it, up to lockGrace. A live holder, or one
// that recorded nothing, fails it at once.
func (d Dir) lock() (func(), error) {
	deadline := time.Now().Add(lockGrace)
	for {
		release, err := TryLock(d.LockFile())
		if err == nil || !errors.Is(err, ErrLocked) {
			return release, err
		}
		id, rerr := d.ReadProcess()
		switch {
		case rerr != nil:
			return nil, err
		case id.Alive():
			return nil, fmt.Errorf("%w (%s)", err, id)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%w: its last lab process, pid %d, has ended, but the lock was still held %s later", err, id.PID, lockGrace)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ClaimPID records the current process in the PID file, failing with
// ErrLocked when a live lab process already holds it. The claim is a lock
// held until release (or the process's end): two lab processes started at
// once on one state directory cannot both claim it.
func (d Dir) ClaimPID() (self procid.ID, release func(), err error) {
	self, err = procid.Self()
	if err != nil {
		return procid.ID{}, nil, err
	}
	release, err = d.lock()
	if err != nil {
		return procid.ID{}, nil, err
	}
	if id, err := d.ReadProcess(); err == nil && id.PID != self.PID && id.Alive() {
		release()
		return procid.ID{}, nil, fmt.Errorf("%w (%s)", ErrLocked, id)
	}
	data, err := json.Marshal(self)
	if err == nil {
		err = atomicfile.Write(d.PIDFile(), append(data, '\n'), 0o644)
	}
	if err != nil {
		release()
		return procid.ID{}, nil, err
	}
	return self, release, nil
}
