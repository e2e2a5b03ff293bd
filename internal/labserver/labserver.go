// Package labserver is the detached lab process of the embedded backend: it
// owns the state directory, runs the control plane in-process and each node
// as a child process of the same binary, reports through the status file and
// stops everything it started on SIGTERM.
package labserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/controlplane"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// Options configure the lab process.
type Options struct {
	Dir labstate.Dir
	// Executable is the dralab binary that runs nodes ("dralab node ...").
	Executable string
	// Verbosity is passed to node processes.
	Verbosity int
}

// NodeLabelProfile is the node label naming the node's GPU profile.
const NodeLabelProfile = "gpu.dralab.dev/profile"

// Run runs the lab until ctx ends, then stops nodes and the control plane.
func Run(ctx context.Context, o Options) (err error) {
	logger := klog.FromContext(ctx)
	dir := o.Dir
	if err := dir.ClaimPID(); err != nil {
		return err
	}
	defer os.Remove(dir.PIDFile())

	cfg, err := config.Load(dir.Config())
	if err != nil {
		return err
	}
	status := &labstate.Status{Phase: labstate.PhaseStarting, PID: os.Getpid(), ConfigHash: cfg.Hash(), StartedAt: time.Now()}
	report := func() {
		if err := dir.WriteStatus(status); err != nil {
			logger.Error(err, "Writing status")
		}
	}
	report()
	defer func() {
		if err != nil {
			status.Phase, status.Message = labstate.PhaseFailed, err.Error()
			report()
		}
	}()

	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.APIServerPort)))
	if err != nil {
		return fmt.Errorf("API server port %d on 127.0.0.1: %w", cfg.APIServerPort, err)
	}
	server := "https://" + listener.Addr().String()
	status.APIServer = server

	var nodeNames []string
	for _, n := range cfg.Nodes {
		nodeNames = append(nodeNames, n.Name)
	}
	pkiFiles, err := writePKI(dir, server, nodeNames)
	if err != nil {
		listener.Close()
		return fmt.Errorf("issuing certificates: %w", err)
	}
	if err := writeSchedulerConfig(dir); err != nil {
		listener.Close()
		return err
	}

	// Nodes start while the control plane does: their kubelets retry until
	// the API answers, and their own start-up overlaps with it.
	nodes := newSupervisor(o, pkiFiles.CACert)
	defer nodes.stopAll(10 * time.Second)
	for _, n := range cfg.Nodes {
		if err := nodes.start(ctx, n); err != nil {
			listener.Close()
			return err
		}
	}

	cp, err := controlplane.Start(ctx, controlplane.Options{
		Listener:                    listener,
		EtcdDir:                     dir.Etcd(),
		EtcdLog:                     dir.Log("etcd"),
		PKI:                         pkiFiles,
		SchedulerKubeconfig:         dir.ComponentKubeconfig("kube-scheduler"),
		ControllerManagerKubeconfig: dir.ComponentKubeconfig("kube-controller-manager"),
		SchedulerConfig:             dir.SchedulerConfig(),
		AdminKubeconfig:             dir.Kubeconfig(),
	})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer cp.Stop()

	status.Phase = labstate.PhaseRunning
	status.Nodes = nodes.statuses()
	report()
	logger.Info("Lab running", "apiServer", server)

	for {
		select {
		case <-ctx.Done():
			status.Phase = labstate.PhaseStopping
			status.Nodes = nodes.statuses()
			report()
			return nil
		case err := <-cp.Errors():
			return err
		case <-nodes.changed:
			status.Nodes = nodes.statuses()
			report()
		}
	}
}

// supervisor runs node processes.
type supervisor struct {
	opts    Options
	caCert  string
	mu      sync.Mutex
	nodes   []*nodeProcess
	changed chan struct{}
}

type nodeProcess struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	exit string
}

func newSupervisor(o Options, caCert string) *supervisor {
	return &supervisor{opts: o, caCert: caCert, changed: make(chan struct{}, 1)}
}

func (s *supervisor) start(ctx context.Context, n config.Node) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(s.opts.Dir.Log("node-"+n.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"node",
		"--state-dir=" + string(s.opts.Dir),
		"--name=" + n.Name,
		"--port=" + strconv.Itoa(port),
		"--ca-cert=" + s.caCert,
		"--v=" + strconv.Itoa(s.opts.Verbosity),
	}
	for k, v := range nodeLabels(n) {
		args = append(args, "--label="+k+"="+v)
	}
	cmd := exec.Command(s.opts.Executable, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A node never outlives its lab, even when the lab is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting node %s: %w", n.Name, err)
	}
	klog.FromContext(ctx).V(1).Info("Started node", "node", n.Name, "pid", cmd.Process.Pid, "port", port)
	p := &nodeProcess{name: n.Name, cmd: cmd, done: make(chan struct{})}
	s.mu.Lock()
	s.nodes = append(s.nodes, p)
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		p.exit = "exited"
		if err != nil {
			p.exit = err.Error()
		}
		s.mu.Unlock()
		close(p.done)
		klog.FromContext(ctx).Info("Node process ended", "node", n.Name, "exit", p.exit)
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}()
	return nil
}

func (s *supervisor) statuses() []labstate.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []labstate.NodeStatus
	for _, p := range s.nodes {
		st := labstate.NodeStatus{Name: p.name, PID: p.cmd.Process.Pid, Running: p.exit == "", Exit: p.exit}
		out = append(out, st)
	}
	return out
}

// stopAll asks every node to stop, and kills those that have not within grace.
func (s *supervisor) stopAll(grace time.Duration) {
	s.mu.Lock()
	nodes := append([]*nodeProcess(nil), s.nodes...)
	s.mu.Unlock()
	for _, p := range nodes {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, p := range nodes {
		select {
		case <-p.done:
		case <-deadline:
			for _, q := range nodes {
				_ = syscall.Kill(-q.cmd.Process.Pid, syscall.SIGKILL)
			}
			for _, q := range nodes {
				<-q.done
			}
			return
		}
	}
}

// nodeLabels are the labels a node registers with: its configured labels
// and, for a GPU node, its GPU profile.
func nodeLabels(n config.Node) map[string]string {
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	if n.GPUs != nil {
		labels[NodeLabelProfile] = n.GPUs.Profile
	}
	return labels
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// schedulerConfig raises the scheduler's client limits and weights the
// DynamicResources score so that a prioritized list's order holds across
// nodes: with the default weight (2) other scores can outweigh it and a pod
// gets its second choice while its first is free on another node.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 1000
  burst: 1000
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      enabled:
      - name: DynamicResources
        weight: 20
`

func writeSchedulerConfig(dir labstate.Dir) error {
	data := fmt.Sprintf(schedulerConfig, dir.ComponentKubeconfig("kube-scheduler"))
	if err := labstate.WriteFileAtomic(dir.SchedulerConfig(), []byte(data), 0o600); err != nil {
		return fmt.Errorf("writing scheduler config: %w", err)
	}
	return nil
}
