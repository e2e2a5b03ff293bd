// Package labserver is the detached lab process of the embedded backend: it
// owns the state directory, runs the control plane in-process and each node
// as a child process of the same binary, reports through the status file and
// stops everything it started on SIGTERM.
package labserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/controlplane"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
)

// Options configure the lab process.
type Options struct {
	Dir labstate.Dir
	// Executable is the dralab binary that runs nodes ("dralab node ...");
	// the GPU driver's binary is beside it.
	Executable string
	// Verbosity is passed to node processes.
	Verbosity int
}

// Run runs the lab until ctx ends, then stops nodes and the control plane.
//
// A lab with a recorded owner (a test's lab) also ends when its owner does,
// and then deletes its state directory: no lab outlives the test that
// started it, however that test ended. If such a lab fails to start, the
// process stays only to watch its owner, so that the state it keeps for
// debugging is deleted with it.
func Run(ctx context.Context, o Options) error {
	logger := klog.FromContext(ctx)
	dir := o.Dir
	self, err := dir.ClaimPID()
	if err != nil {
		return err
	}
	owner, owned, err := dir.ReadOwner()
	if err != nil {
		os.Remove(dir.PIDFile())
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ownerGone := make(chan struct{})
	if owned {
		go watchOwner(owner, ownerGone, cancel)
	}
	err = run(runCtx, o, self)
	if owned && err != nil {
		logger.Info("The lab failed; its state is kept until its owner ends", "owner", owner, "err", err)
		select {
		case <-ownerGone:
		case <-ctx.Done():
		}
	}
	select {
	case <-ownerGone:
		logger.Info("The lab's owner ended: deleting the lab", "owner", owner, "stateDir", dir)
		if rerr := os.RemoveAll(string(dir)); rerr != nil {
			return fmt.Errorf("deleting the lab of %s: %w", owner, rerr)
		}
		// A test's state root holds only its lab.
		_ = os.Remove(filepath.Dir(string(dir)))
		return nil
	default:
	}
	os.Remove(dir.PIDFile())
	return err
}

// ownerPoll is how often a lab checks that its owner still runs.
const ownerPoll = 250 * time.Millisecond

// watchOwner closes gone and cancels the lab once the owner has ended.
func watchOwner(owner procid.ID, gone chan<- struct{}, cancel context.CancelFunc) {
	t := time.NewTicker(ownerPoll)
	defer t.Stop()
	for owner.Alive() {
		<-t.C
	}
	close(gone)
	cancel()
}

func run(ctx context.Context, o Options, self procid.ID) (err error) {
	logger := klog.FromContext(ctx)
	dir := o.Dir
	cfg, err := config.Load(dir.Config())
	if err != nil {
		return err
	}
	// A lab resumed on its state serves where it did before, when it
	// can: its users' kubeconfigs keep working.
	port := cfg.APIServerPort
	if prev, err := dir.ReadStatus(); err == nil && port == 0 {
		port = previousPort(prev.APIServer)
	}
	status := &labstate.Status{Phase: labstate.PhaseStarting, ID: self, ConfigHash: cfg.Hash(), StartedAt: time.Now()}
	report := func() {
		if err := dir.WriteStatus(status); err != nil {
			logger.Error(err, "Writing status")
		}
	}
	report()
	defer func() {
		if err != nil {
			// Logged before the status says Failed: whoever sees the
			// status (lab:up, which keeps the logs of a lab it deletes)
			// finds the reason in the log already.
			logger.Error(err, "The lab failed")
			status.Phase, status.Message = labstate.PhaseFailed, err.Error()
			report()
		}
	}()

	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil && port != cfg.APIServerPort {
		logger.Info("The lab's previous API server port is taken: serving on another", "port", port, "err", err)
		listener, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", "0"))
	}
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
	settings := cfg.ControlPlane.Settings()
	if settings.GCPercent != 0 {
		debug.SetGCPercent(int(settings.GCPercent))
	}
	if err := writeSchedulerConfig(dir, settings); err != nil {
		listener.Close()
		return err
	}
	if err := atomicfile.Write(dir.AuditPolicy(), []byte(auditPolicy), 0o600); err != nil {
		listener.Close()
		return fmt.Errorf("writing the audit policy: %w", err)
	}

	// Nodes start while the control plane does: their kubelets retry until
	// the API answers, and their own start-up overlaps with it.
	procs := newSupervisor(o)
	var cp *controlplane.ControlPlane
	// Drivers and nodes stop while the API server still answers, so that
	// they unprepare and deregister against it; the control plane last.
	defer func() { shutdown(ctx, procs, dir, cfg, cp) }()
	for _, n := range cfg.Nodes {
		if err := dir.Node(n.Name).Link(); err != nil {
			listener.Close()
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, n := range cfg.Nodes {
		if n.Kind == config.NodeReal {
			if err := startRealNode(ctx, procs, o, n, pkiFiles.CACert); err != nil {
				listener.Close()
				return fmt.Errorf("real node %s: %w", n.Name, err)
			}
			continue
		}
		rebind := func() ([]string, []string, error) {
			args, err := nodeArgs(dir, n, pkiFiles.CACert, o.Verbosity)
			return args, nil, err
		}
		args, _, err := rebind()
		if err == nil {
			err = procs.startProcess(ctx, &process{role: labstate.RoleNode, node: n.Name, args: args, rebind: rebind, restart: true})
		}
		if err != nil {
			listener.Close()
			return err
		}
	}

	cp, err = controlplane.Start(ctx, controlplane.Options{
		Listener:                    listener,
		EtcdDir:                     dir.Etcd(),
		EtcdLog:                     dir.Log("etcd"),
		EtcdSocket:                  dir.EtcdSocket(),
		PKI:                         pkiFiles,
		SchedulerKubeconfig:         dir.ComponentKubeconfig("kube-scheduler"),
		ControllerManagerKubeconfig: dir.ComponentKubeconfig("kube-controller-manager"),
		SchedulerConfig:             dir.SchedulerConfig(),
		ControllerManagerQPS:        settings.ClientQPS,
		ClaimWorkers:                settings.ClaimWorkers,
		AdminKubeconfig:             dir.Kubeconfig(),
		AuditPolicy:                 dir.AuditPolicy(),
		AuditLog:                    dir.AuditLog(),
	})
	if err != nil {
		cp = nil
		return fmt.Errorf("starting the control plane: %w", err)
	}

	if err := grantDrivers(ctx, dir); err != nil {
		return err
	}
	if err := applyDeviceClasses(ctx, dir, cfg); err != nil {
		return err
	}
	if cfg.Driver != nil {
		if err := applyManifests(ctx, dir, cfg.Driver.Manifests); err != nil {
			return err
		}
	}
	for _, n := range cfg.Nodes {
		var err error
		switch {
		case cfg.Driver != nil:
			var p *process
			if p, err = outsideDriver(dir, cfg.Driver, n); err == nil {
				err = procs.startProcess(ctx, p)
			}
		case n.GPUs != nil:
			err = procs.start(ctx, labstate.RoleDriver, n.Name, driverArgs(dir, n, o.Verbosity), true)
		}
		if err != nil {
			return err
		}
	}

	if err := startAttachController(ctx, dir, cfg); err != nil {
		return fmt.Errorf("starting the attach controller: %w", err)
	}
	if err := startDashboard(ctx, dir, cfg); err != nil {
		return fmt.Errorf("starting the dashboard: %w", err)
	}

	status.Phase = labstate.PhaseRunning
	status.Processes = procs.statuses()
	report()
	logger.Info("Lab running", "apiServer", server)

	for {
		select {
		case <-ctx.Done():
			status.Phase = labstate.PhaseStopping
			status.Processes = procs.statuses()
			report()
			return nil
		case err := <-cp.Errors():
			return err
		case <-procs.changed:
			status.Processes = procs.statuses()
			report()
		}
	}
}

// previousPort is the port of a previous run's API server address
// (https://127.0.0.1:port), or 0.
func previousPort(server string) int {
	u, err := url.Parse(server)
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

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
	case p.role == labstate.RoleDriver:
		exe = filepath.Join(filepath.Dir(exe), build.DriverBinary)
	}
	cmd := exec.Command(exe, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A child never outlives its lab, even when the lab is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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

// nodeArgs runs a hollow node.
func nodeArgs(dir labstate.Dir, n config.Node, caCert string, verbosity int) ([]string, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"node",
		"--state-dir=" + string(dir),
		"--name=" + n.Name,
		"--port=" + strconv.Itoa(port),
		"--ca-cert=" + caCert,
		"--v=" + strconv.Itoa(verbosity),
	}
	for k, v := range nodeLabels(n) {
		args = append(args, "--label="+k+"="+v)
	}
	return args, nil
}

// driverArgs runs the GPU driver of a node, with the node's identity: the
// Node authorizer lets it write its own ResourceSlices; the driver group
// lets it read claims, as a DaemonSet's ServiceAccount would, which the
// conformance suite's sanity checks need (they prepare claims no pod uses).
func driverArgs(dir labstate.Dir, n config.Node, verbosity int) []string {
	nd := dir.Node(n.Name)
	inventory := []string{"--inventory=fake", "--profile=" + n.GPUs.Profile, "--gpus=" + strconv.Itoa(n.GPUs.Count)}
	if p := n.GPUs.Partitioning; p != "" {
		inventory = append(inventory, "--partitioning="+p)
	}
	if sh := n.GPUs.Sharing; sh != "" {
		inventory = append(inventory, "--sharing="+sh)
	}
	if a := n.GPUs.Attach; a != "" {
		inventory = append(inventory, "--attach="+a)
	}
	if n.GPUs.NVML != "" {
		inventory = []string{"--inventory=nvml", "--nvml=" + nvml.SourceOf(n.GPUs.NVML)}
	}
	return append(inventory,
		"--node-name="+n.Name,
		"--kubeconfig="+nd.DriverKubeconfig(),
		"--mode="+n.GPUs.Mode,
		"--kubelet-registrar-dir="+nd.PluginsRegistry(),
		"--kubelet-plugins-dir="+nd.Plugins(),
		"--kubelet-device-plugins-dir="+devicePluginsDir(n, nd),
		"--cdi-dir="+nd.CDI(),
		"--checkpoint-dir="+nd.DriverCheckpoint(),
		"--faults-file="+nd.GPUFaults(),
		"--v="+strconv.Itoa(verbosity),
	)
}

// outsideDriver runs a configured outside driver's kubelet plugin on a
// node, with the node's credentials, directories and ports in its
// placeholders. Nodes share the host's network namespace: each gets its
// own free loopback ports, and others if one was taken before the plugin
// bound it.
func outsideDriver(dir labstate.Dir, d *config.Driver, n config.Node) (*process, error) {
	nd := dir.Node(n.Name)
	pluginDir := filepath.Join(nd.Plugins(), d.Name)
	for _, dir := range []string{pluginDir, nd.DriverCheckpoint(), nd.CDI()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
	}
	expand := func() ([]string, []string, error) {
		values := map[string]string{
			"{nodeName}":     n.Name,
			"{kubeconfig}":   nd.DriverKubeconfig(),
			"{registrarDir}": nd.PluginsRegistry(),
			"{pluginDir}":    pluginDir,
			"{pluginsDir}":   nd.Plugins(),
			"{cdiDir}":       nd.CDI(),
			"{stateDir}":     nd.DriverCheckpoint(),
		}
		for _, name := range d.PortNames() {
			port, err := freePort()
			if err != nil {
				return nil, nil, err
			}
			values[config.PortPlaceholder(name)] = strconv.Itoa(port)
		}
		command, extra := d.Expand(values)
		env := os.Environ()
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			env = append(env, k+"="+extra[k])
		}
		return command, env, nil
	}
	command, env, err := expand()
	if err != nil {
		return nil, err
	}
	return &process{role: labstate.RoleDriver, node: n.Name, bin: command[0], args: command[1:], env: env, restart: true,
		rebind: func() ([]string, []string, error) {
			command, env, err := expand()
			if err != nil {
				return nil, nil, err
			}
			return command[1:], env, nil
		}}, nil
}

// nodeLabels are the labels a node registers with: its configured labels
// and, for a GPU node, its GPU profile.
func nodeLabels(n config.Node) map[string]string {
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	if n.GPUs != nil && n.GPUs.Profile != "" {
		labels[gpu.NodeProfileLabel] = n.GPUs.Profile
	}
	return labels
}

// devicePluginsDir is where a node's kubelet serves the device-plugin
// Registration service: a fixed host path for the real kubelet.
func devicePluginsDir(n config.Node, nd labstate.NodeDir) string {
	if n.Kind == config.NodeReal {
		return realnode.DevicePluginsDir
	}
	return nd.DevicePlugins()
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
// gets its second choice while its first is free on another node. The
// lab's controlPlane settings fill it in.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
parallelism: %d
percentageOfNodesToScore: %d
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      enabled:
      - name: DynamicResources
        weight: %d
`

// auditPolicy records what drivers do: the requests of the lab's drivers
// and of workload service accounts (a driver installed with its chart), at
// Metadata level, so that a driver's RBAC can be compared with the verbs it
// really uses. The controllers' own service accounts (kube-system) and
// everyone else are not recorded: the log stays small on busy labs.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Metadata
  userGroups: ["system:serviceaccounts", "` + labstate.DriverGroup + `"]
- level: None
`

func writeSchedulerConfig(dir labstate.Dir, cp config.ControlPlane) error {
	data := fmt.Sprintf(schedulerConfig, dir.ComponentKubeconfig("kube-scheduler"), cp.ClientQPS, cp.ClientQPS, cp.Parallelism, *cp.PercentageOfNodesToScore, cp.DynamicResourcesWeight)
	if err := atomicfile.Write(dir.SchedulerConfig(), []byte(data), 0o600); err != nil {
		return fmt.Errorf("writing scheduler config: %w", err)
	}
	return nil
}
