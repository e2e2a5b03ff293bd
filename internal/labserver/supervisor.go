package labserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/childproc"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/procid"
)

// supervisor runs the lab's child processes: one node per configured node
// and, beside each GPU node, its driver. A process that dies is started
// again, as systemd restarts a kubelet and a DaemonSet a driver: each
// resumes from its own state (the kubelet's and the driver's checkpoints).
type supervisor struct {
	opts    Options
	mu      sync.Mutex
	procs   []*process
	changed chan struct{}
	wg      sync.WaitGroup
}

type process struct {
	role, node string
	// bin and env default to the dralab binary and the lab's environment.
	bin     string
	args    []string
	env     []string
	restart bool
	// rebind, when set, gives new arguments with another port for a
	// process that ended because its port was taken: a free port is found
	// by binding and closing, and another program may take it before the
	// process binds it.
	rebind func() (args, env []string, err error)

	// Guarded by supervisor.mu.
	rebinds   int
	logOffset int64
	// started is when the process last started; crashes counts its ends
	// in a row that came before stableRun.
	started  time.Time
	crashes  int
	cmd      *exec.Cmd
	id       procid.ID
	running  bool
	restarts int
	exit     string
	stopping bool
}

func newSupervisor(o Options) *supervisor {
	return &supervisor{opts: o, changed: make(chan struct{}, 1)}
}

// start runs a process; when it ends on its own and restart is set, it is
// started again after a second.
func (s *supervisor) start(ctx context.Context, role, node string, args []string, restart bool) error {
	return s.startProcess(ctx, &process{role: role, node: node, args: args, restart: restart})
}

func (s *supervisor) startProcess(ctx context.Context, p *process) error {
	if err := s.spawn(ctx, p); err != nil {
		return err
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return nil
}

func (s *supervisor) spawn(ctx context.Context, p *process) error {
	logFile, err := os.OpenFile(s.opts.Dir.Log(p.role+"-"+p.node), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	offset, _ := logFile.Seek(0, io.SeekEnd)
	exe := s.opts.Executable
	switch {
	case p.bin != "":
		exe = p.bin
	case slices.Contains(nodedrivers.Roles(), p.role):
		exe = filepath.Join(filepath.Dir(exe), build.DriverBinary)
	}
	cmd := exec.Command(exe, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childproc.Attr() // a child never outlives its lab
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s of node %s: %w", p.role, p.node, err)
	}
	// Until it is waited for, the child keeps its PID: it is identified
	// before anything else could take it.
	id, err := procid.OfChild(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("identifying %s of node %s: %w", p.role, p.node, err)
	}
	klog.FromContext(ctx).V(1).Info("Started process", "role", p.role, "node", p.node, "pid", cmd.Process.Pid)
	s.mu.Lock()
	p.cmd, p.id, p.running, p.logOffset, p.started = cmd, id, true, offset, time.Now()
	s.mu.Unlock()
	s.wg.Add(1)
	go s.wait(ctx, p, cmd)
	return nil
}

func (s *supervisor) wait(ctx context.Context, p *process, cmd *exec.Cmd) {
	defer s.wg.Done()
	err := cmd.Wait()
	s.mu.Lock()
	p.running = false
	p.exit = "exited"
	if err != nil {
		p.exit = err.Error()
	}
	again := p.restart && !p.stopping && ctx.Err() == nil
	rebind := p.rebind != nil && !p.stopping && ctx.Err() == nil && p.rebinds < maxRebinds && s.portTaken(p)
	if time.Since(p.started) < stableRun {
		p.crashes++
	} else {
		p.crashes = 0
	}
	delay := restartDelay(p.crashes)
	s.mu.Unlock()
	if rebind {
		s.rebind(ctx, p)
		return
	}
	klog.FromContext(ctx).Info("Process ended", "role", p.role, "node", p.node, "exit", p.exit, "restart", again, "after", delay)
	s.notify()
	if !again {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	s.mu.Lock()
	stopping := p.stopping
	if !stopping {
		p.restarts++
	}
	s.mu.Unlock()
	if stopping {
		return
	}
	if err := s.spawn(ctx, p); err != nil {
		klog.FromContext(ctx).Error(err, "Restarting process", "role", p.role, "node", p.node)
	}
	s.notify()
}

// stableRun is how long a process must have run for its end not to count
// as a crash on start.
const stableRun = 10 * time.Second

// restartDelay is how long a process waits to be started again after
// ending crashes times in a row without a stable run: a second, doubled
// for each crash after the first, at most 30 s, as systemd and the
// kubelet back off a process that cannot start.
func restartDelay(crashes int) time.Duration {
	d := time.Second
	for i := 1; i < crashes && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// maxRebinds bounds how often a process is given another port.
const maxRebinds = 3

// portTaken tells whether the process's log, since it was started, says
// it could not bind its port.
func (s *supervisor) portTaken(p *process) bool {
	f, err := os.Open(s.opts.Dir.Log(p.role + "-" + p.node))
	if err != nil {
		return false
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, p.logOffset, 1<<20))
	return err == nil && bytes.Contains(data, []byte("address already in use"))
}

// rebind starts a process again, at once, on another port.
func (s *supervisor) rebind(ctx context.Context, p *process) {
	logger := klog.FromContext(ctx)
	args, env, err := p.rebind()
	if err == nil {
		s.mu.Lock()
		p.args = args
		if env != nil {
			p.env = env
		}
		p.rebinds++
		s.mu.Unlock()
		logger.Info("Port taken: starting the process again on another", "role", p.role, "node", p.node)
		err = s.spawn(ctx, p)
	}
	if err != nil {
		logger.Error(err, "Starting the process on another port", "role", p.role, "node", p.node)
	}
	s.notify()
}

func (s *supervisor) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *supervisor) statuses() []labstate.ProcessStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]labstate.ProcessStatus, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, labstate.ProcessStatus{Role: p.role, Node: p.node, ID: p.id, Running: p.running, Restarts: p.restarts, Exit: p.exit})
	}
	return out
}

// stop asks the processes of the given roles to stop, kills those still
// running after grace, and waits up to grace more for them to be reaped.
func (s *supervisor) stop(ctx context.Context, grace time.Duration, roles ...string) {
	s.mu.Lock()
	var procs []*process
	for _, p := range s.procs {
		if slices.Contains(roles, p.role) {
			procs = append(procs, p)
			p.stopping = true
			if p.running {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	s.mu.Unlock()
	if s.waitStopped(ctx, procs, grace) == nil {
		return
	}
	for _, p := range procs {
		if s.isRunning(p) {
			_ = p.cmd.Process.Kill()
		}
	}
	if err := s.waitStopped(ctx, procs, grace); err != nil {
		klog.FromContext(ctx).Error(err, "Processes of the lab did not end after SIGKILL", "roles", roles)
	}
}

// waitStopped waits up to timeout for the processes to be reaped.
func (s *supervisor) waitStopped(ctx context.Context, procs []*process, timeout time.Duration) error {
	var left []string
	err := wait.PollUntilContextTimeout(context.WithoutCancel(ctx), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		left = left[:0]
		for _, p := range procs {
			if s.isRunning(p) {
				left = append(left, fmt.Sprintf("%s of node %s (pid %d)", p.role, p.node, p.cmd.Process.Pid))
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waited %s for %s to end: %w", timeout, strings.Join(left, ", "), err)
	}
	return nil
}

func (s *supervisor) isRunning(p *process) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.running
}
