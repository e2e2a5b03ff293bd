package kit

import (
	"context"
	goflag "flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// What a driver's command shares with every other: flags with
// environment-variable twins, a client of the API server, and the HTTP
// endpoints (health, metrics) it serves.

// Env gives every flag of a command an environment-variable twin:
// Prefix + the flag's name in upper case, dashes as underscores.
type Env struct {
	Prefix string
}

// Name is a flag's environment variable.
func (e Env) Name(flag string) string {
	return e.Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Flag names a flag and its twin for an error message: "--x (or $P_X)".
func (e Env) Flag(flag string) string {
	return fmt.Sprintf("--%s (or $%s)", flag, e.Name(flag))
}

// Document appends each flag's twin to its usage.
func (e Env) Document(fs *pflag.FlagSet) {
	fs.VisitAll(func(fl *pflag.Flag) {
		fl.Usage += fmt.Sprintf(" [$%s]", e.Name(fl.Name))
	})
}

// Apply sets every flag not given on the command line from its twin.
func (e Env) Apply(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed {
			return
		}
		if v, ok := os.LookupEnv(e.Name(fl.Name)); ok {
			if serr := fs.Set(fl.Name, v); serr != nil {
				err = fmt.Errorf("$%s: %w", e.Name(fl.Name), serr)
			}
		}
	})
	return err
}

// KubeClient is a client of the API server that a kubeconfig names, or of
// the cluster the driver runs in where kubeconfig is empty; wrap, if any,
// wrap its transport (PaceSliceWrites).
func KubeClient(kubeconfig, userAgent string, wrap ...func(http.RoundTripper) http.RoundTripper) (kubernetes.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	cfg.UserAgent = userAgent
	for _, w := range wrap {
		cfg.Wrap(w)
	}
	return kubernetes.NewForConfig(cfg)
}

// Endpoint is an HTTP handler a driver serves at Path on Address; Flag
// names the setting of the address in errors. An empty address is not
// served.
type Endpoint struct {
	Flag, Address, Path string
	Handler             http.Handler
}

// ServeEndpoints listens on the endpoints' addresses, one listener for the
// endpoints of one address, and serves them until ctx ends or stop is
// called. A taken address is an error naming its flag: bound before
// anything registers, a taken port is a failed start, not a driver the
// kubelet uses while its probes fail.
func ServeEndpoints(ctx context.Context, endpoints ...Endpoint) (stop func(), err error) {
	type listener struct {
		flag string
		mux  *http.ServeMux
	}
	var order []string
	byAddress := map[string]*listener{}
	for _, e := range endpoints {
		if e.Address == "" {
			continue
		}
		l, ok := byAddress[e.Address]
		if !ok {
			l = &listener{flag: e.Flag, mux: http.NewServeMux()}
			byAddress[e.Address] = l
			order = append(order, e.Address)
		}
		l.mux.Handle(e.Path, e.Handler)
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, address := range order {
		e := byAddress[address]
		l, err := net.Listen("tcp", address)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", e.flag, err)
		}
		stops = append(stops, Serve(ctx, l, e.mux))
		klog.FromContext(ctx).Info("Serving", "address", l.Addr().String(), "flag", e.flag)
	}
	return stop, nil
}

// NodeFlags are the settings every driver command of a node has: where it
// meets the kubelet, the container runtime and the API server, where it
// keeps its checkpoint and serves its endpoints.
type NodeFlags struct {
	NodeName   string
	Kubeconfig string
	// RegistrarDir is the kubelet's plugin registration directory,
	// PluginsDir the parent of the driver's socket directory.
	RegistrarDir string
	PluginsDir   string
	CDIDir       string
	// CheckpointDir keeps the checkpoint of prepared claims.
	CheckpointDir string
	// PodUID is the driver pod's UID: set, the kubelet plugin supports
	// rolling updates.
	PodUID string
	// HealthzAddress and MetricsAddress are where /healthz and /metrics
	// are served; empty: not served.
	HealthzAddress string
	MetricsAddress string
	// List prints the devices the driver would publish and exits.
	List bool
	// DevicesPerSlice is the most devices a slice of the pool holds.
	DevicesPerSlice int
	// SliceWriteInterval is the least time between two of the driver's
	// ResourceSlice writes (PaceSliceWrites); 0: not paced.
	SliceWriteInterval time.Duration
}

// AddFlags defines the node flags on fs; checkpointDir is the default of
// --checkpoint-dir.
func (o *NodeFlags) AddFlags(fs *pflag.FlagSet, checkpointDir string) {
	fs.StringVar(&o.NodeName, "node-name", "", "the node this driver serves (required)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	fs.StringVar(&o.RegistrarDir, "kubelet-registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
	fs.StringVar(&o.PluginsDir, "kubelet-plugins-dir", "/var/lib/kubelet/plugins", "parent of the driver's DRA socket directory")
	fs.StringVar(&o.CDIDir, "cdi-dir", "/var/run/cdi", "where CDI specs are written for the container runtime")
	fs.StringVar(&o.CheckpointDir, "checkpoint-dir", checkpointDir, "where the checkpoint of prepared claims is kept")
	fs.StringVar(&o.PodUID, "pod-uid", "", "the driver pod's UID (the downward API's metadata.uid): the kubelet then talks to the new pod of a rolling update beside the old one (kubelet 1.33 or later); empty: one pod per node at a time")
	fs.StringVar(&o.HealthzAddress, "healthz-address", "", "host:port of /healthz, 200 once the kubelet has registered the driver and its ResourceSlices are published, 503 with the reason before; empty: off")
	fs.StringVar(&o.MetricsAddress, "metrics-address", "", "host:port of /metrics, the driver's Prometheus metrics (prepared claims; prepares, unprepares, their errors and durations); empty: off")
	fs.BoolVar(&o.List, "list", false, "print the devices the driver would publish, as YAML, and exit")
	fs.IntVar(&o.DevicesPerSlice, "devices-per-slice", 0, "publish the node's pool in slices of at most this many devices, as a driver with more devices than a slice holds does (the pool's resourceSliceCount names them all); 0: as many as the API allows")
	fs.DurationVar(&o.SliceWriteInterval, "slice-write-interval", 0, "the least time between two of the driver's ResourceSlice writes, as where the API server throttles a driver: a pool of several slices moving to a new generation stays incomplete for as long as its writes take, and the allocator takes nothing from it meanwhile; 0: not paced")
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
}

// podUIDPattern is a pod UID as the API server writes it.
var podUIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// CheckPodUID says what is wrong with --pod-uid, naming the flag (e the
// command's environment twins).
func (o *NodeFlags) CheckPodUID(e Env) error {
	if o.PodUID != "" && !podUIDPattern.MatchString(o.PodUID) {
		return fmt.Errorf("%s %q is not a pod UID: want a UUID such as 6d2f9a3c-8b4e-4f7a-a1c2-5e9b0d3f7c42, the pod's metadata.uid from the downward API", e.Flag("pod-uid"), o.PodUID)
	}
	return nil
}

// CheckSliceWriteInterval says what is wrong with --slice-write-interval.
func (o *NodeFlags) CheckSliceWriteInterval(e Env) error {
	if d := o.SliceWriteInterval; d < 0 {
		return fmt.Errorf("%s %v: must not be negative", e.Flag("slice-write-interval"), d)
	}
	return nil
}

// CheckNodeName says that --node-name is missing, if it is.
func (o *NodeFlags) CheckNodeName(e Env) error {
	if o.NodeName == "" {
		return fmt.Errorf("%s is required", e.Flag("node-name"))
	}
	return nil
}

// ServeEndpoints serves the health and metrics endpoints at the
// configured addresses.
func (o *NodeFlags) ServeEndpoints(ctx context.Context, e Env, health http.Handler, metrics *Metrics) (stop func(), err error) {
	return ServeEndpoints(ctx,
		Endpoint{Flag: e.Flag("healthz-address"), Address: o.HealthzAddress, Path: "/healthz", Handler: health},
		Endpoint{Flag: e.Flag("metrics-address"), Address: o.MetricsAddress, Path: "/metrics", Handler: metrics.Handler()})
}

// Options are the kit's options of a driver on these settings: the
// caller adds its inventory and what is its own.
func (o *NodeFlags) Options(driverName string, client kubernetes.Interface) Options {
	return Options{
		DriverName:       driverName,
		NodeName:         o.NodeName,
		KubeClient:       client,
		RegistrarDir:     o.RegistrarDir,
		PluginDir:        filepath.Join(o.PluginsDir, driverName),
		CDIDir:           o.CDIDir,
		CheckpointPath:   filepath.Join(o.CheckpointDir, "checkpoint.json"),
		RollingUpdateUID: types.UID(o.PodUID),
		DevicesPerSlice:  o.DevicesPerSlice,
	}
}

// Command is a driver application's command: before it runs, each flag
// left unset takes its environment-variable twin; with --list it writes
// the devices it would publish instead of running. The caller adds its
// own flags to it, then documents them (Env.Document).
func (o *NodeFlags) Command(use, short, long string, e Env, list func(ctx context.Context, w io.Writer) error, run func(ctx context.Context) error) *cobra.Command {
	return &cobra.Command{
		Use:           use,
		Short:         short,
		Long:          long + "\n\nEvery flag can also be set through the environment variable named in brackets.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return e.Apply(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.List {
				return list(cmd.Context(), cmd.OutOrStdout())
			}
			return run(cmd.Context())
		},
	}
}

// RunDriver runs a driver on the kit until ctx ends: it checks the node
// flags, connects to the API server, serves health and metrics, has setup
// fill in the kit's options (the inventory, the CDI kind, the environment
// prefix and what else is the driver's own), and starts the driver, whose
// devices are healthy until it says otherwise.
func (o *NodeFlags) RunDriver(ctx context.Context, e Env, driverName string, setup func(ctx context.Context, client kubernetes.Interface, ko *Options) error) error {
	return o.Run(ctx, e, Run{Name: driverName, Setup: setup})
}

// Run is how a driver's command runs on the kit (NodeFlags.Run): what it
// does beyond RunDriver's steps, each optional.
type Run struct {
	// Name is the driver's name.
	Name string
	// Open runs first, once the endpoints serve: what must fail before
	// anything else on a node that lacks it (NVML's library). Its close
	// runs when the driver ends.
	Open func(ctx context.Context) (close func(), err error)
	// WithoutClient runs the driver without a client of the API server:
	// a device plugin talks to its kubelet only, and starts before the API
	// serves and before it has credentials.
	WithoutClient bool
	// Setup fills in the kit's options; client is nil without one.
	Setup func(ctx context.Context, client kubernetes.Interface, ko *Options) error
	// Serve, if set, serves the driver instead of a DRA kubelet plugin (a
	// device plugin): it returns what the health endpoint asks and how to
	// stop it.
	Serve func(ctx context.Context, ko Options) (Readier, func(), error)
	// Started runs once a DRA driver has started (its health monitors).
	Started func(ctx context.Context, d *Driver) error
}

// Run runs a driver on the kit until ctx ends: it checks the pod UID,
// serves health and metrics (bound before anything registers: a taken
// port is a failed start, not a driver the kubelet uses while its probes
// fail), opens what the driver opens first, checks the node name,
// connects to the API server, has Setup fill in the kit's options, and
// serves the driver.
func (o *NodeFlags) Run(ctx context.Context, e Env, r Run) error {
	logger := klog.FromContext(ctx).WithValues("node", o.NodeName, "driver", r.Name)
	ctx = klog.NewContext(ctx, logger)
	if err := o.CheckPodUID(e); err != nil {
		return err
	}
	health := &Health{}
	metrics := NewMetrics(r.Name)
	stop, err := o.ServeEndpoints(ctx, e, health, metrics)
	if err != nil {
		return err
	}
	defer stop()
	if r.Open != nil {
		closeOpened, err := r.Open(ctx)
		if err != nil {
			return err
		}
		defer closeOpened()
	}
	if err := o.CheckNodeName(e); err != nil {
		return err
	}
	if err := o.CheckSliceWriteInterval(e); err != nil {
		return err
	}
	var client kubernetes.Interface
	if !r.WithoutClient {
		var wrap []func(http.RoundTripper) http.RoundTripper
		if o.SliceWriteInterval > 0 {
			wrap = append(wrap, PaceSliceWrites(o.SliceWriteInterval))
		}
		if client, err = KubeClient(o.Kubeconfig, r.Name, wrap...); err != nil {
			return err
		}
	}
	ko := o.Options(r.Name, client)
	ko.Metrics, ko.ReportHealth = metrics, true
	if r.Setup != nil {
		if err := r.Setup(ctx, client, &ko); err != nil {
			return err
		}
	}
	if r.Serve != nil {
		ready, stopServing, err := r.Serve(ctx, ko)
		if err != nil {
			return err
		}
		defer stopServing()
		health.Watch(ready)
	} else {
		d, err := Start(ctx, ko)
		if err != nil {
			return err
		}
		defer d.Stop()
		health.Watch(d)
		if r.Started != nil {
			if err := r.Started(ctx, d); err != nil {
				return err
			}
		}
	}
	logger.Info("Driver running")
	<-ctx.Done()
	logger.Info("Driver stopping")
	return nil
}

// WriteDevices writes an inventory's devices, as a ResourceSlice publishes
// them, to w as YAML: what --list prints.
func WriteDevices(ctx context.Context, inv Inventory, w io.Writer) error {
	devs, err := inv.Devices(ctx)
	if err != nil {
		return err
	}
	api := make([]resourceapi.Device, 0, len(devs))
	for _, d := range devs {
		api = append(api, d.API)
	}
	data, err := yaml.Marshal(api)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
