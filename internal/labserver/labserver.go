// Package labserver is the detached lab process of the embedded backend: it
// owns the state directory, runs the control plane in-process and each node
// as a child process of the same binary, reports through the status file and
// stops everything it started on SIGTERM.
package labserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/controlplane/options"
	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/internal/nodedrivers"
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
	// StartControlPlane starts the lab's Kubernetes control plane: the
	// dralab binary passes internal/controlplane's Start. It is given, not
	// imported, so that this package builds without Kubernetes' own
	// packages and test:race runs its tests without compiling them.
	StartControlPlane func(context.Context, options.Options) (ControlPlane, error)
}

// ControlPlane is a running control plane (internal/controlplane's).
type ControlPlane interface {
	// Ready waits until the API server is ready and the scheduler and the
	// controller manager run (StartControlPlane returns once the API
	// server serves), and says why not where they do not.
	Ready(context.Context) error
	// Errors reports a component that stopped on its own.
	Errors() <-chan error
	// Stop stops the components and waits for them to end.
	Stop()
}

// Run runs the lab until ctx ends, then stops nodes and the control plane.
//
// A lab with a recorded owner (a test's lab) also ends when its owner does,
// and then deletes its state directory: no lab outlives the test that
// started it, however that test ended. If such a lab fails to start, the
// process stays only to watch its owner, so that the state it keeps for
// debugging is deleted with it.
func Run(ctx context.Context, o Options) error {
	if o.StartControlPlane == nil {
		return errors.New("labserver.Options.StartControlPlane is not set")
	}
	logger := klog.FromContext(ctx)
	dir := o.Dir
	self, release, err := dir.ClaimPID()
	if err != nil {
		return err
	}
	defer release()
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
		// Its state records what the host still holds when the cleanup
		// failed, and nothing mounted under it is deleted.
		if left := (*HostLeftError)(nil); errors.As(err, &left) {
			return fmt.Errorf("the lab's owner %s ended, but %w; the state is kept at %s for lab:down to try again", owner, left, dir)
		}
		logger.Info("The lab's owner ended: deleting the lab", "owner", owner, "stateDir", dir)
		if rerr := mounts.RemoveAll(string(dir)); rerr != nil {
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
	clock := newStartClock()
	dir := o.Dir
	cfg, err := config.Load(dir.Config())
	if err != nil {
		return err
	}
	// A lab resumed on its state serves where it did before, when it
	// can: its users' kubeconfigs keep working.
	// Until it listens, its status keeps the address it served at: a
	// resume that fails before then leaves the next one that address.
	port, cameUp, server := cfg.APIServerPort, false, ""
	if prev, err := dir.ReadStatus(); err == nil {
		cameUp = prev.CameUp || prev.Phase == labstate.PhaseRunning
		if port == 0 {
			port, server = previousPort(prev.APIServer), prev.APIServer
		}
	}
	status := &labstate.Status{Phase: labstate.PhaseStarting, ID: self, ConfigHash: cfg.Hash(), StartedAt: time.Now(), CameUp: cameUp, APIServer: server}
	report := func() {
		if err := dir.WriteStatus(status); err != nil {
			logger.Error(err, "Writing status")
		}
	}
	report()
	// The reason is logged as soon as the lab fails, before it stops what
	// it started: a shutdown can take seconds, and whoever reads the log
	// meanwhile (lab:up, which keeps the logs of a lab it deletes, even
	// when the lab process dies mid-shutdown) finds it there.
	logged := false
	logFailure := func(err error) {
		if err != nil && !logged {
			logged = true
			logger.Error(err, "The lab failed")
		}
	}
	defer func() {
		if err != nil {
			logFailure(err)
			status.Phase, status.Message = labstate.PhaseFailed, err.Error()
			report()
		}
	}()

	listener, err := listenAPIServer(port)
	if err != nil && port != cfg.APIServerPort {
		logger.Info("The lab's previous API server port is taken: serving on another", "port", port, "err", err)
		listener, err = listenAPIServer(0)
	}
	if err != nil {
		return fmt.Errorf("API server port %d on 127.0.0.1: %w", cfg.APIServerPort, err)
	}
	server = "https://" + listener.Addr().String()
	status.APIServer = server
	clock.step("configuration")

	var nodeNames []string
	for _, n := range cfg.Nodes {
		nodeNames = append(nodeNames, n.Name)
	}
	pkiFiles, err := writePKI(dir, server, cfg.Name, nodeNames)
	if err != nil {
		listener.Close()
		return fmt.Errorf("issuing certificates: %w", err)
	}
	settings := cfg.ControlPlane.Settings()
	gcPercent := 100 // Go's default, GOGC unset
	if settings.GCPercent != 0 {
		gcPercent = int(settings.GCPercent)
	}
	// The start allocates much that it drops at once (every API group's
	// storage, the OpenAPI documents): collecting it at Go's default target
	// took a third of the lab process's CPU while the API server was being
	// built, and on two cores that alone held the start for 0.3 s. The
	// lab's target holds from the control plane's readiness on, and what
	// the start left is returned then.
	debug.SetGCPercent(max(gcPercent, 400))
	if err := writeSchedulerConfig(dir, settings); err != nil {
		listener.Close()
		return err
	}
	if err := atomicfile.Write(dir.AuditPolicy(), []byte(auditPolicy), 0o600); err != nil {
		listener.Close()
		return fmt.Errorf("writing the audit policy: %w", err)
	}
	clock.step("certificates")

	// Nodes start while the control plane does: their kubelets retry until
	// the API answers, and their own start-up overlaps with it.
	procs := newSupervisor(o)
	var cp ControlPlane
	// Drivers and nodes stop while the API server still answers, so that
	// they unprepare and deregister against it; the control plane last.
	defer func() {
		logFailure(err)
		err = errors.Join(err, shutdown(ctx, procs, dir, cfg, cp))
	}()
	for _, n := range cfg.Nodes {
		if err := dir.Node(n.Name).Link(); err != nil {
			listener.Close()
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, n := range cfg.Nodes {
		if n.Kind == config.NodeReal {
			if err := startRealNode(ctx, procs, o, cfg, n, pkiFiles.CACert, cfg.FeatureGatesFlag()); err != nil {
				listener.Close()
				return fmt.Errorf("real node %s: %w", n.Name, err)
			}
			continue
		}
		rebind := func() ([]string, []string, error) {
			args, err := nodeArgs(dir, cfg, n, pkiFiles.CACert, cfg.FeatureGatesFlag(), o.Verbosity)
			return args, nil, err
		}
		args, _, err := rebind()
		if err == nil {
			err = procs.startProcess(ctx, &process{role: labstate.RoleNode, node: n.Name, args: args, rebind: rebind, restart: true})
		}
		for _, k := range nodedrivers.Of(cfg, n) {
			// A driver that talks to its kubelet only, started now,
			// registers before the node does, whose first status then
			// counts its devices.
			if err == nil && k.StartsWithNode(n) {
				var p *process
				if p, err = driverProcess(dir, cfg, k, n, o.Verbosity); err == nil {
					err = procs.startProcess(ctx, p)
				}
			}
		}
		if err != nil {
			listener.Close()
			return err
		}
	}
	clock.step("nodes started")

	cp, err = o.StartControlPlane(ctx, options.Options{
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
		FeatureGates:                cfg.FeatureGatesFlag(),
		RuntimeConfig:               cfg.RuntimeConfigFlag(),
	})
	if err != nil {
		cp = nil
		return fmt.Errorf("starting the control plane: %w", err)
	}
	clock.step("control plane serving")

	admin, err := kubeclient.New(dir.Kubeconfig())
	if err != nil {
		return err
	}
	enclosures, err := startFabric(ctx, admin, cfg)
	if err != nil {
		return err
	}
	// The drivers start while the API server finishes its start: their
	// access and tokens need only the lab's own objects and their Nodes.
	if err := startDrivers(ctx, admin, procs, dir, cfg, o.Verbosity); err != nil {
		return err
	}
	clock.step("drivers started")
	if err := cp.Ready(ctx); err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	clock.step("control plane ready")
	if err := enclosures.published(ctx); err != nil {
		return err
	}
	debug.SetGCPercent(gcPercent)
	go debug.FreeOSMemory() // beside the drivers' first second
	// An outside driver's manifests may hold namespaced objects, which go
	// to the default namespace: the API server writes it in its start.
	if cfg.Driver != nil {
		if err := applyManifests(ctx, dir, cfg.Driver.Manifests); err != nil {
			return err
		}
	}
	keeper := &tokenKeeper{client: admin, dir: dir, cfg: cfg, now: time.Now}
	tick := time.NewTicker(driverauth.TokenCheck)
	defer tick.Stop()
	go keeper.keep(ctx, tick.C)
	if err := startAttachController(ctx, dir, cfg, enclosures); err != nil {
		return fmt.Errorf("starting the attach controller: %w", err)
	}
	if err := startDashboard(ctx, dir, cfg); err != nil {
		return fmt.Errorf("starting the dashboard: %w", err)
	}

	clock.step("attach controller and dashboard")
	status.Phase, status.CameUp = labstate.PhaseRunning, true
	status.Processes = procs.statuses()
	report()
	logger.Info("Lab running", append([]any{"apiServer", server}, clock.steps...)...)

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

// startDrivers grants the lab's drivers their access, applies the lab's
// DeviceClasses, and starts every driver
// that did not start with its node, each once its Node is registered and its
// token issued.
func startDrivers(ctx context.Context, admin kubernetes.Interface, procs *supervisor, dir labstate.Dir, cfg *config.Config, verbosity int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return grantDrivers(gctx, admin, dir, cfg) })
	g.Go(func() error { return applyDeviceClasses(gctx, dir, cfg) })
	if err := g.Wait(); err != nil {
		return err
	}
	// Each node's drivers start as soon as its Node is registered: a
	// driver's first publish takes a second (its ResourceSlice controller's
	// first look), which then runs beside the other nodes' registration.
	g, gctx = errgroup.WithContext(ctx)
	for _, n := range cfg.Nodes {
		g.Go(func() error {
			for _, d := range driversOf(dir, cfg, n) {
				if err := issueDriverToken(gctx, admin, d, n.Name); err != nil {
					return err
				}
			}
			for _, k := range nodedrivers.Of(cfg, n) {
				var p *process
				var err error
				switch {
				case k.StartsWithNode(n):
					continue // started with its node
				case cfg.Driver != nil:
					p, err = outsideDriver(dir, cfg.Driver, n)
				default:
					if err = nodedrivers.WriteFiles(k, dir.Node(n.Name), cfg, n); err == nil {
						p, err = driverProcess(dir, cfg, k, n, verbosity)
					}
				}
				if err == nil {
					// The lab's context, not the group's: a driver
					// lives as long as the lab.
					err = procs.startProcess(ctx, p)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// startClock times the steps of the lab's start, for the "Lab running"
// line of its log: where a slow start spent its seconds.
type startClock struct {
	last  time.Time
	steps []any // step, duration, step, duration, ...
}

func newStartClock() *startClock { return &startClock{last: time.Now()} }

// step ends the step named and starts the next.
func (c *startClock) step(name string) {
	now := time.Now()
	c.steps = append(c.steps, name, now.Sub(c.last).Round(time.Millisecond).String())
	c.last = now
}

// shutdown stops the lab's processes in order: drivers, kubelets, the
// control plane (so that drivers and kubelets stop against a live API
// server); then, on
// a real node, the pods through the CRI while containerd still runs (which
// tears down their networks), containerd, and what is left on the host.
// What it could not undo on the host is returned as a *HostLeftError.
func shutdown(ctx context.Context, procs *supervisor, dir labstate.Dir, cfg *config.Config, cp ControlPlane) error {
	logger := klog.FromContext(ctx)
	const grace = 10 * time.Second
	bg := context.WithoutCancel(ctx)
	for _, role := range nodedrivers.Roles() {
		procs.stop(bg, grace, role)
	}
	procs.stop(bg, grace, labstate.RoleNode)
	logger.Info("Stopped the lab's drivers and nodes")
	if cp != nil {
		cp.Stop()
		logger.Info("Stopped the control plane")
	}
	for _, n := range cfg.Nodes {
		if n.Kind != config.NodeReal {
			continue
		}
		p := realnode.Paths{Node: dir.Node(n.Name)}
		rctx, cancel := context.WithTimeout(bg, 30*time.Second)
		if err := realnode.RemovePods(rctx, p); err != nil {
			logger.Error(err, "Removing the real node's pods", "node", n.Name)
		}
		cancel()
	}
	procs.stop(bg, grace, labstate.RoleContainerd)
	var left error
	if err := CleanupHost(bg, dir); err != nil {
		logger.Error(err, "Cleaning up the host")
		left = &HostLeftError{Err: err}
	}
	for _, nd := range dir.Nodes() {
		if err := nd.Unlink(); err != nil {
			logger.Error(err, "Removing a node's short path", "node", nd)
		}
	}
	return left
}

// HostLeftError says that the lab stopped but left something on the host
// that its cleanup could not undo: its state, which records what that is,
// is kept for lab:down to try again.
type HostLeftError struct{ Err error }

func (e *HostLeftError) Error() string { return "cleaning up the host: " + e.Err.Error() }
func (e *HostLeftError) Unwrap() error { return e.Err }

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

// listenAPIServer listens on a loopback port for the API server: port, or
// for 0 a free one outside the kernel's range of local ports for outgoing
// connections. A port from that range can be taken, once the lab's process
// has ended, by any program's outgoing connection, and a resumed lab would
// then serve elsewhere than its users' kubeconfigs say.
func listenAPIServer(port int) (net.Listener, error) {
	if port != 0 {
		return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	lo, hi := servePortRange(readLocalPortRange())
	for range 64 {
		p := lo + rand.IntN(hi-lo+1)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// readLocalPortRange reads the kernel's range of local ports for outgoing
// connections, or Linux's default where it cannot.
func readLocalPortRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var l, h int
	if _, err := fmt.Sscan(string(b), &l, &h); err == nil && l > 0 && h >= l {
		return l, h
	}
	return lo, hi
}

// servePortRange is where a lab's API server picks its port: the
// unprivileged ports below the range of local ports for outgoing
// connections, or above it when too few are below.
func servePortRange(ephemeralLo, ephemeralHi int) (lo, hi int) {
	const minimum, span = 10000, 1000
	switch {
	case ephemeralLo-minimum >= span:
		return minimum, ephemeralLo - 1
	case 65535-ephemeralHi >= span:
		return ephemeralHi + 1, 65535
	default:
		return minimum, 65535
	}
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

// bindingTimeoutConfig sets the DynamicResources plugin's binding timeout,
// appended to schedulerConfig's one profile.
const bindingTimeoutConfig = `  pluginConfig:
  - name: DynamicResources
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: DynamicResourcesArgs
      bindingTimeout: %s
`

// auditPolicy records what drivers do: the requests of service accounts
// (the lab's drivers, in labstate.DriversNamespace, and a driver installed
// with its chart), at
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
  userGroups: ["system:serviceaccounts"]
- level: None
`

func writeSchedulerConfig(dir labstate.Dir, cp config.ControlPlane) error {
	data := fmt.Sprintf(schedulerConfig, dir.ComponentKubeconfig("kube-scheduler"), cp.ClientQPS, cp.ClientQPS, cp.Parallelism, *cp.PercentageOfNodesToScore, cp.DynamicResourcesWeight)
	if cp.BindingTimeout != "" {
		data += fmt.Sprintf(bindingTimeoutConfig, cp.BindingTimeout)
	}
	if err := atomicfile.Write(dir.SchedulerConfig(), []byte(data), 0o600); err != nil {
		return fmt.Errorf("writing scheduler config: %w", err)
	}
	return nil
}
