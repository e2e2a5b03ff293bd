// Package embedded is the embedded lab backend: a real Kubernetes control
// plane in one detached lab process and each node a child process of it, all
// from one dralab binary. This package only starts, queries and stops that
// process; the process itself is `dralab lab serve`.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/status"
)

// Timeouts of Up. A warm lab is Ready in seconds; these bound a broken one.
const (
	controlPlaneTimeout = 3 * time.Minute
	stopTimeout         = 30 * time.Second
)

// Backend is the embedded backend.
type Backend struct {
	root   string
	binary func(context.Context) (string, error)
	// owner, when not 0, is the PID of the process whose end deletes the
	// labs this backend starts.
	owner int
}

var _ backend.Backend = &Backend{}

// New returns the backend. Labs keep their state in root/<name>; binary
// returns the dralab binary to run (it may build it).
func New(root string, binary func(context.Context) (string, error)) *Backend {
	return &Backend{root: root, binary: binary}
}

// OwnedBy makes the labs this backend starts end, and delete themselves,
// when the process with that PID (as it runs now) ends: a test's lab does
// not outlive the test, however it ends.
func (b *Backend) OwnedBy(pid int) *Backend {
	b.owner = pid
	return b
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return config.BackendEmbedded }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{HollowNodes: true}
}

func (b *Backend) dir(name string) labstate.Dir { return labstate.Dir(filepath.Join(b.root, name)) }

// Kubeconfig implements backend.Backend.
func (b *Backend) Kubeconfig(name string) string { return b.dir(name).Kubeconfig() }

// Up implements backend.Backend.
func (b *Backend) Up(ctx context.Context, cfg *config.Config, progress ui.Progress) (status.UpResult, error) {
	logger := klog.FromContext(ctx)
	dir := b.dir(cfg.Name)

	running, current, err := b.running(dir)
	if err != nil {
		return status.UpResult{}, err
	}
	if running {
		if current.ConfigHash != cfg.Hash() {
			return status.UpResult{}, fmt.Errorf("%w: lab %q (pid %d, state %s); delete it with `go run mage.go lab:down` or give the new lab another name",
				status.ErrConfigMismatch, cfg.Name, current.PID, dir)
		}
		done := progress(fmt.Sprintf("Reusing running lab %q (pid %d)", cfg.Name, current.PID))
		err := b.checkHealthy(ctx, cfg.Name)
		if err == nil {
			err = waitTokensKept(ctx, dir, cfg, tokensKeptTimeout)
		}
		if err == nil {
			err = backend.WaitReady(ctx, dir.Kubeconfig(), cfg, backend.SameName, b.nodeLogHint(dir))
		}
		done(err)
		return status.UpResult{Reused: true}, err
	}
	resume := false
	if _, err := os.Stat(string(dir)); err == nil {
		// State without a live lab process: a lab that crashed or was
		// killed. One that had come up with this configuration comes back
		// on its etcd data, as a rebooted cluster does; any other is
		// deleted.
		why := b.resumable(dir, cfg)
		resume = why == ""
		if resume {
			logger.Info("Resuming a lab whose process ended, on its etcd data", "dir", dir)
			err = b.undoRealNodes(ctx, dir)
		} else {
			logger.Info("Removing stale state of a lab that no longer runs", "dir", dir, "why", why)
			err = b.removeState(ctx, dir)
		}
		if err != nil {
			return status.UpResult{}, err
		}
	}
	if cfg.APIServerPort != 0 {
		if err := checkPortFree(cfg.APIServerPort); err != nil {
			return status.UpResult{}, err
		}
	}
	if err := checkSocketPaths(dir, cfg); err != nil {
		return status.UpResult{}, err
	}

	// The first build compiles Kubernetes: its line says how far it has
	// come, where the caller shows a moving line.
	update, done := ui.LiveOr(ctx, progress)("Preparing the dralab binary")
	bin, err := b.binary(build.WithReporter(ctx, func(p build.Progress) { update(p.String()) }))
	done(err)
	if err != nil {
		return status.UpResult{}, err
	}
	if hasRealNode(cfg) {
		if err := checkRealNodeHost(); err != nil {
			return status.UpResult{}, err
		}
		done := progress("Preparing containerd " + build.ContainerdVersion + " for the real node (the first build takes minutes)")
		err := build.Containerd(ctx, filepath.Dir(bin))
		done(err)
		if err != nil {
			return status.UpResult{}, err
		}
	}

	step := "Starting control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)"
	if resume {
		step = fmt.Sprintf("Resuming lab %q on its etcd data (its process had ended): starting the control plane", cfg.Name)
	}
	done = progress(step)
	started := time.Now()
	err = b.start(ctx, dir, cfg, bin)
	done(err)
	if err == nil {
		done = progress(fmt.Sprintf("Waiting for %d node(s) to be Ready with their devices published", len(cfg.Nodes)))
		// A resumed lab's etcd has its nodes Ready from before: only what
		// their kubelets report from now on counts.
		err = backend.WaitReadySince(ctx, dir.Kubeconfig(), cfg, started, backend.SameName, b.nodeLogHint(dir))
		done(err)
	}
	if err != nil && resume {
		if kerr := b.keepForResume(ctx, dir, err); kerr != nil {
			return status.UpResult{Resumed: true}, errors.Join(err, kerr)
		}
		return status.UpResult{Resumed: true}, fmt.Errorf("%w\n(resuming lab %q failed; its state is kept in %s: `go run mage.go lab:up` tries again, `go run mage.go lab:down` deletes it)", err, cfg.Name, dir)
	}
	return status.UpResult{Resumed: resume}, err
}

// checkHealthy explains a running lab whose node, runtime or driver
// process died: a kubelet or containerd that died mid-run left pods and
// mounts behind, so the lab is recreated rather than patched.
func (b *Backend) checkHealthy(ctx context.Context, name string) error {
	st, err := b.Status(ctx, name)
	if err != nil {
		return err
	}
	if st.Phase != status.PhaseDegraded {
		return nil
	}
	var why []string
	for _, n := range st.Nodes {
		if !n.Healthy {
			why = append(why, fmt.Sprintf("node %s: %s; driver %s", n.Name, n.Process, orDash(n.Driver)))
		}
	}
	if st.Message != "" {
		why = append(why, st.Message)
	}
	return fmt.Errorf("%w: %s; recreate it with: go run mage.go lab:down && go run mage.go lab:up (logs: %s)",
		status.ErrDegraded, strings.Join(why, "; "), b.dir(name).Logs())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// running reports whether a live lab process owns dir, with its status.
func (b *Backend) running(dir labstate.Dir) (bool, *labstate.Status, error) {
	id, err := dir.ReadProcess()
	if errors.Is(err, os.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	if !id.Alive() {
		return false, nil, nil
	}
	st, err := dir.ReadStatus()
	if err != nil {
		return false, nil, fmt.Errorf("lab process %d runs but its status is unreadable: %w", id.PID, err)
	}
	return true, st, nil
}

func (b *Backend) start(ctx context.Context, dir labstate.Dir, cfg *config.Config, bin string) error {
	if err := os.MkdirAll(dir.Logs(), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(string(dir), 0o700); err != nil {
		return err
	}
	if err := cfg.Record(dir.Config()); err != nil {
		return err
	}
	if b.owner != 0 {
		owner, err := procid.Of(b.owner)
		if err != nil {
			return fmt.Errorf("the lab's owner: %w", err)
		}
		if err := dir.WriteOwner(owner); err != nil {
			return err
		}
	}
	logPath := dir.Log("lab")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	args := []string{"lab", "serve", "--state-dir=" + string(dir)}
	if v := klog.V(1); v.Enabled() {
		args = append(args, "--v=2")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devNull, logFile, logFile
	// Its own session: the lab outlives this command and its terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var last *labstate.Status
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, controlPlaneTimeout, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("the lab process exited (%v)", err)
		default:
		}
		s, err := dir.ReadStatus()
		if err != nil || s.PID != cmd.Process.Pid {
			// A resumed lab's state holds the status of the process
			// that was killed until the new one writes its own.
			return false, nil
		}
		last = s
		switch s.Phase {
		case labstate.PhaseRunning:
			return true, nil
		case labstate.PhaseFailed:
			return false, errors.New(s.Message)
		}
		return false, nil
	})
	if err != nil {
		if last == nil || last.Phase != labstate.PhaseFailed {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		return fmt.Errorf("starting the control plane: %w\n%s", err, logTail(logPath, 15))
	}
	return nil
}

func (b *Backend) nodeLogHint(dir labstate.Dir) func(node, component string) string {
	return func(node, component string) string { return dir.Log(component + "-" + node) }
}

var _ backend.Dashboarder = &Backend{}

// DashboardURL implements backend.Dashboarder: the URL the lab process
// recorded when it started its dashboard.
func (b *Backend) DashboardURL(name string) (string, error) {
	data, err := os.ReadFile(b.dir(name).DashboardURL())
	if err != nil {
		return "", fmt.Errorf("lab %s has no dashboard URL (is it running? go run mage.go lab:status): %w", name, err)
	}
	return strings.TrimSpace(string(data)), nil
}

var _ backend.PodResourcer = &Backend{}

// PodResourcesSocket implements backend.PodResourcer: each node's kubelet,
// hollow or real, serves it under its root directory.
func (b *Backend) PodResourcesSocket(name, node string) (string, error) {
	nd := b.dir(name).Node(node)
	if _, err := os.Stat(string(nd)); err != nil {
		return "", fmt.Errorf("lab %s has no state for node %s: %w", name, node, err)
	}
	return nd.PodResourcesSocket(), nil
}

var _ backend.DriverMetricser = &Backend{}

// DriverMetrics implements backend.DriverMetricser: the addresses the
// node's GPU and NIC drivers were started with, from the node's state.
func (b *Backend) DriverMetrics(name, node string) (map[string]string, error) {
	return nodedrivers.MetricsAddresses(b.dir(name).Node(node))
}

var _ backend.GPUFaulter = &Backend{}

// UpdateGPUFaults implements backend.GPUFaulter: the faults file in the
// node's state directory, which the node's driver polls.
func (b *Backend) UpdateGPUFaults(_ context.Context, name, node string, update func(map[string]gpu.GPUFault)) error {
	dir := b.dir(name)
	if _, err := os.Stat(string(dir.Node(node))); err != nil {
		return fmt.Errorf("lab %s has no state for node %s: %w", name, node, err)
	}
	path := dir.Node(node).GPUFaults()
	faults, err := gpu.ReadFaults(path)
	if err != nil {
		return err
	}
	update(faults)
	return gpu.WriteFaults(path, faults)
}

// Down implements backend.Backend.
func (b *Backend) Down(ctx context.Context, name string) error {
	dir := b.dir(name)
	if _, err := os.Stat(string(dir)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return b.removeState(ctx, dir)
}

// removeState stops the lab's processes, if any still run, undoes what a
// real node did to the host, and deletes the state directory.
func (b *Backend) removeState(ctx context.Context, dir labstate.Dir) error {
	// Only processes that match what the lab recorded (PID, start time,
	// boot, executable) are signalled: a PID reused by another program
	// since is left alone.
	var procs []procid.ID
	if id, err := dir.ReadProcess(); err == nil {
		procs = append(procs, id)
	}
	if s, err := dir.ReadStatus(); err == nil {
		for _, p := range s.Processes {
			procs = append(procs, p.ID)
		}
	}
	// The lab process stops its nodes itself; terminating them too only
	// makes it faster.
	if err := procid.Stop(ctx, procs, stopTimeout); err != nil {
		return fmt.Errorf("stopping the lab of %s: %w", dir, err)
	}
	if err := b.undoRealNodes(ctx, dir); err != nil {
		return err
	}
	// Nothing is deleted while something is still mounted under the
	// state: os.RemoveAll would descend into it.
	nodes := dir.Nodes()
	if err := mounts.RemoveAll(string(dir)); err != nil {
		return fmt.Errorf("removing lab state %s: %w", dir, err)
	}
	for _, nd := range nodes {
		if err := nd.Unlink(); err != nil {
			return fmt.Errorf("node %s of %s: %w", nd, dir, err)
		}
	}
	return nil
}

// CollectLogs implements backend.Backend.
func (b *Backend) CollectLogs(ctx context.Context, name, out string) error {
	src := b.dir(name).Logs()
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("lab %q has no logs: %w", name, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(out, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

var _ backend.DriverRestarter = &Backend{}

// RestartDriver implements backend.DriverRestarter: it kills the process
// the lab recorded for the role and node (PID and start time: a PID reused
// by another program is left alone) and waits 30 s at most for the lab to
// start another.
func (b *Backend) RestartDriver(ctx context.Context, name, role, node string) error {
	dir := b.dir(name)
	st, err := dir.ReadStatus()
	if err != nil {
		return err
	}
	p, ok := st.Process(role, node)
	if !ok || !p.Running {
		return fmt.Errorf("lab %s runs no %s on node %s", name, role, node)
	}
	if err := p.ID.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the %s of node %s: %w", role, node, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st, err := dir.ReadStatus()
		if err != nil {
			return false, nil
		}
		q, ok := st.Process(role, node)
		return ok && q.Running && q.ID != p.ID && q.ID.Alive(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting 30 s for lab %s to start the %s of node %s again: %w", name, role, node, err)
	}
	return nil
}
