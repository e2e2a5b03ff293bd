// Package lab is dralab's public API for clusters: create a lab from a
// configuration, reuse it, query it, collect its logs and delete it, on the
// backend the configuration names.
//
//	l, err := lab.New(lab.WithConfigFile("lab/examples/mixed.yaml"))
//	_, err = l.Up(ctx)
//	kubeconfig := l.Kubeconfig()
//	err = l.Down(ctx)
package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/internal/embedded"
	"github.com/dralab/dralab/lab/internal/kindcmd"
	"github.com/dralab/dralab/lab/status"
)

// EnvConfig names a lab configuration file to use instead of the default.
const EnvConfig = "DRALAB_CONFIG"

// EnvBackend overrides the configuration's backend: "embedded" or "kind".
const EnvBackend = "DRALAB_BACKEND"

// EnvKindNodeImage overrides a kind lab's node image (nodeImage).
const EnvKindNodeImage = "DRALAB_KIND_NODE_IMAGE"

// Re-exported so that users need one import.
type (
	Status     = status.Status
	NodeStatus = status.NodeStatus
	UpResult   = status.UpResult
)

// Lab is one lab, running or not.
type Lab struct {
	cfg      *config.Config
	source   string
	backend  backend.Backend
	progress ui.Progress
	retain   bool
	// owned: a test owns the lab and keeps its own diagnostics.
	owned bool
	// backendWhy says why the backend was chosen, when not by the config.
	backendWhy string
}

type options struct {
	cfg        *config.Config
	configFile string
	stateRoot  string
	binary     string
	progress   ui.Progress
	retain     bool
	owner      int
}

// Option configures New.
type Option func(*options)

// WithConfig uses cfg as the lab's configuration.
func WithConfig(cfg *config.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithConfigFile reads the lab's configuration from a file.
func WithConfigFile(path string) Option { return func(o *options) { o.configFile = path } }

// WithStateRoot keeps labs' state under dir instead of the default
// ($DRALAB_STATE_DIR or ~/.local/state/dralab).
func WithStateRoot(dir string) Option { return func(o *options) { o.stateRoot = dir } }

// WithBinary runs this dralab binary instead of building one.
func WithBinary(path string) Option { return func(o *options) { o.binary = path } }

// Progress is told each long step as it starts, and returns the function
// the lab calls with the step's error (nil on success) when it ends: a
// command shows the steps, a test may log them.
type Progress func(step string) (done func(err error))

// WithProgress reports long steps to p.
func WithProgress(p Progress) Option { return func(o *options) { o.progress = ui.Progress(p) } }

// WithRetain keeps a lab that failed to come up, for debugging.
func WithRetain(retain bool) Option { return func(o *options) { o.retain = retain } }

// WithOwner makes the lab end, and delete itself, when the process with
// that PID ends, however it ends (a test's os.Getpid(): a failed Setup
// that exits, a `go test -timeout`, SIGKILL). Labs without an owner, like
// lab:up's, run until lab:down. Only the embedded backend has owners.
func WithOwner(pid int) Option { return func(o *options) { o.owner = pid } }

// New returns a lab. Without WithConfig or WithConfigFile it reads the file
// named by $DRALAB_CONFIG, else uses the default configuration.
func New(opts ...Option) (*Lab, error) {
	o := options{progress: ui.NoProgress}
	for _, opt := range opts {
		opt(&o)
	}
	l := &Lab{cfg: o.cfg, source: "WithConfig", progress: o.progress, retain: o.retain, owned: o.owner != 0}
	if l.cfg != nil {
		if err := l.cfg.Complete(); err != nil {
			return nil, fmt.Errorf("%w: %w", config.ErrInvalid, err)
		}
	} else {
		file := o.configFile
		if file == "" {
			file = os.Getenv(EnvConfig)
		}
		if file == "" {
			l.cfg, l.source = config.Default(), "the default configuration (lab/examples/default.yaml)"
		} else {
			cfg, err := config.Load(file)
			if err != nil {
				return nil, err
			}
			l.cfg, l.source = cfg, file
		}
	}
	// The GPU names only the driver knows, before anything changes.
	if err := l.cfg.CheckGPUs(nodedrivers.Catalog); err != nil {
		return nil, err
	}
	root, err := stateRoot(opts)
	if err != nil {
		return nil, err
	}
	binary := build.Dralab
	if o.binary != "" {
		binary = func(context.Context) (string, error) { return o.binary, nil }
	}
	if b := os.Getenv(EnvBackend); b != "" {
		l.cfg.Backend = b
		l.backendWhy = EnvBackend + "=" + b
		if err := l.cfg.Complete(); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", config.ErrInvalid, EnvBackend, err)
		}
	}
	if image := os.Getenv(EnvKindNodeImage); image != "" && l.cfg.Backend == config.BackendKind {
		l.cfg.NodeImage = image
		if err := l.cfg.Complete(); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", config.ErrInvalid, EnvKindNodeImage, err)
		}
	}
	switch l.cfg.Backend {
	case config.BackendEmbedded:
		l.backend = embedded.New(root, binary).OwnedBy(o.owner)
	case config.BackendKind:
		l.backend = kindcmd.New(root, build.Kind)
	default:
		return nil, fmt.Errorf("%w: backend %q (from %s)", ErrUnsupported, l.cfg.Backend, l.source)
	}
	return l, nil
}

// Conditions a user can act on; Up's errors wrap them.
var (
	// ErrConfigMismatch: a lab of that name runs with another
	// configuration (lab:down it first).
	ErrConfigMismatch = status.ErrConfigMismatch
	// ErrPortInUse: the configured API server port is taken.
	ErrPortInUse = status.ErrPortInUse
	// ErrHostNotReady: the host lacks what a real node needs.
	ErrHostNotReady = status.ErrHostNotReady
	// ErrPathTooLong: a node's plugin socket would not fit a unix socket
	// path (a shorter state root or node name helps).
	ErrPathTooLong = status.ErrPathTooLong
	// ErrNoEngine: the kind backend found no Docker or Podman engine.
	ErrNoEngine = status.ErrNoEngine
	// ErrDegraded: a process of a running lab has died.
	ErrDegraded = status.ErrDegraded
)

// ErrUnsupported means the configuration asks for something this build
// cannot do.
var ErrUnsupported = errors.New("unsupported")

// Config is the lab's configuration.
func (l *Lab) Config() *config.Config { return l.cfg }

// ConfigSource says where the configuration came from.
func (l *Lab) ConfigSource() string { return l.source }

// Backend names the lab's backend.
func (l *Lab) Backend() string { return l.backend.Name() }

// BackendReason says why the lab uses its backend.
func (l *Lab) BackendReason() string {
	switch {
	case l.backendWhy != "":
		return l.backendWhy
	case l.cfg.Backend == config.BackendEmbedded:
		return "the default; it needs no Docker"
	default:
		return "the configuration asks for it"
	}
}

// Up brings the lab up, or reuses it when it already runs with the same
// configuration. A lab that fails to come up is deleted unless WithRetain,
// or unless it was being resumed: the backend keeps a resumed lab's state
// for another try.
func (l *Lab) Up(ctx context.Context) (UpResult, error) {
	res, err := l.backend.Up(ctx, l.cfg, l.progress)
	if err != nil && !res.Reused && !res.Resumed && !l.retain && !errors.Is(err, ErrConfigMismatch) && !errors.Is(err, ErrPortInUse) && !errors.Is(err, ErrHostNotReady) && !errors.Is(err, ErrNoEngine) {
		bg := context.WithoutCancel(ctx)
		// The error names logs in the state directory, which goes: keep
		// them where the message says. A test that owns the lab collects
		// its own diagnostics.
		if !l.owned {
			if kept, kerr := l.keepLogs(bg); kerr == nil {
				err = fmt.Errorf("%w\n(the lab was deleted; its logs, which the paths above name, are kept in %s)", err, kept)
			}
		}
		if derr := l.backend.Down(bg, l.cfg.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", derr))
		}
	}
	if err != nil {
		if hint := platformHint(runtime.GOOS, l.backend.Name()); hint != "" {
			err = fmt.Errorf("%w\n(%s)", err, hint)
		}
	}
	return res, err
}

// platformHint points a user whose embedded lab failed on a system other
// than Linux, where it is only cross-compiled, to the kind backend.
func platformHint(goos, backend string) string {
	if goos == "linux" || backend != config.BackendEmbedded {
		return ""
	}
	return fmt.Sprintf("the embedded lab is tested on Linux and only cross-compiled for %s: DRALAB_BACKEND=kind runs the same lab on Docker (Docker Desktop on a Mac)", goos)
}

// keepLogs copies the logs of a lab about to be deleted to a new
// temporary directory.
func (l *Lab) keepLogs(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "dralab-"+l.cfg.Name+"-logs-")
	if err != nil {
		return "", err
	}
	if err := l.backend.CollectLogs(ctx, l.cfg.Name, dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Down stops the lab and deletes its state; a lab that does not exist is
// not an error.
func (l *Lab) Down(ctx context.Context) error { return l.backend.Down(ctx, l.cfg.Name) }

// ErrNoDashboard means the lab's backend serves no dashboard.
var ErrNoDashboard = errors.New("this lab's backend serves no dashboard")

// DashboardURL is the URL of the lab's live dashboard, token included.
func (l *Lab) DashboardURL() (string, error) {
	d, ok := l.backend.(backend.Dashboarder)
	if !ok {
		return "", fmt.Errorf("%w (%s backend)", ErrNoDashboard, l.backend.Name())
	}
	return d.DashboardURL(l.cfg.Name)
}

// ServeDashboard serves the live dashboard of the lab's cluster from this
// process until ctx ends, and returns its URL, token included: for
// backends whose labs run no dashboard of their own (kind), as
// lab:dashboard does there. Like the lab process's, it listens on
// 127.0.0.1 only and only reads the cluster.
func (l *Lab) ServeDashboard(ctx context.Context) (string, error) {
	metrics := func(ctx context.Context) (*drametrics.Snapshot, error) {
		return drametrics.Read(ctx, l.Kubeconfig(), l.NodeNames(), l.DriverMetrics)
	}
	return dashboard.Serve(ctx, l.Kubeconfig(), "dralab: "+l.cfg.Name, metrics)
}

// Status reports the lab's state.
func (l *Lab) Status(ctx context.Context) (*Status, error) {
	st, err := l.backend.Status(ctx, l.cfg.Name)
	if st == nil {
		return st, err
	}
	st.FeatureGates, st.RuntimeConfig = l.cfg.FeatureGatesFlag(), l.cfg.RuntimeConfigFlag()
	if st.APIServer != "" && (st.Phase == status.PhaseRunning || st.Phase == status.PhaseDegraded) {
		// The GPUs' health is the status's news, not its condition: an
		// API that does not answer leaves it out.
		if health, herr := l.gpuHealth(ctx); herr == nil {
			for i := range st.Nodes {
				n := &st.Nodes[i]
				n.GPUHealth = health[cmp.Or(n.ClusterNode, n.Name)]
			}
		}
	}
	return st, err
}

// Kubeconfig is the path of the lab's administrator kubeconfig.
func (l *Lab) Kubeconfig() string { return l.backend.Kubeconfig(l.cfg.Name) }

// RESTConfig is a client configuration of the lab's API server, as its
// administrator: what client-go, controller-runtime and e2e-framework take.
func (l *Lab) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("lab %s: %w", l.cfg.Name, err)
	}
	return cfg, nil
}

// CollectLogs copies the lab's logs into dir.
func (l *Lab) CollectLogs(ctx context.Context, dir string) error {
	return l.backend.CollectLogs(ctx, l.cfg.Name, dir)
}
