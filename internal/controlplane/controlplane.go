// Package controlplane runs a real Kubernetes control plane in one process:
// embedded etcd, kube-apiserver, kube-scheduler and kube-controller-manager,
// each built from k8s.io/kubernetes and started through its options and
// Run functions (never its cobra command, which would install a second
// process-wide signal handler).
//
// Feature gates, configz and metrics are process-global, so a process runs
// at most one control plane.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/egressselector"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/configz"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/dralab/dralab/internal/controlplane/options"
)

// ServedResourceVersions are the resource.k8s.io versions the API server
// serves besides v1 (GA, the storage version): v1beta1 (1.32) and v1beta2
// (1.33–1.36, the only version of DeviceTaintRule before 1.37).
const ServedResourceVersions = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"

// ControlPlane is a running control plane.
type ControlPlane struct {
	etcd   *embed.Etcd
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
	// ready is closed once the API server is ready and the scheduler and
	// the controller manager run, or readyErr says why they do not.
	ready    chan struct{}
	readyErr error
}

// Start starts etcd and the API server, and returns once the API server
// serves: nodes may register, and the lab's own objects be written. The
// rest starts behind it: once /readyz answers (the bootstrap roles and
// priority classes written) and the default namespace is served, the
// scheduler and the controller manager; Ready waits for them. The
// components run until ctx is cancelled or Stop is called.
//
// What waits for the API server's readiness is only what needs its
// bootstrap: a node registers through the Node authorizer, and a driver
// needs its Node and the lab's own grants, so that a lab's drivers begin
// their first publish (a second, in the ResourceSlice controller) while the
// API server still bootstraps.
func Start(ctx context.Context, opts options.Options) (*ControlPlane, error) {
	logger := klog.FromContext(ctx)
	if err := setFeatureGates(opts.FeatureGates); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cp := &ControlPlane{cancel: cancel, errs: make(chan error, 3), ready: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			cp.Stop()
		}
	}()

	start := time.Now()
	etcdURL, err := cp.startEtcd(opts)
	if err != nil {
		return nil, err
	}
	logger.Info("etcd ready", "url", etcdURL, "elapsed", time.Since(start))

	if err := cp.startAPIServer(ctx, opts, etcdURL); err != nil {
		return nil, err
	}
	logger.Info("kube-apiserver prepared, starting to serve", "elapsed", time.Since(start))
	if err := waitForServing(ctx, opts.AdminKubeconfig, cp.errs); err != nil {
		return nil, err
	}
	logger.Info("kube-apiserver serving", "elapsed", time.Since(start))

	// Counted before Start returns, so that Stop waits for it and for the
	// components it starts.
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		defer close(cp.ready)
		if cp.readyErr = waitForAPI(ctx, opts.AdminKubeconfig, cp.errs); cp.readyErr != nil {
			return
		}
		logger.Info("kube-apiserver ready", "elapsed", time.Since(start))
		if cp.readyErr = cp.startScheduler(ctx, opts); cp.readyErr != nil {
			return
		}
		if cp.readyErr = cp.startControllerManager(ctx, opts); cp.readyErr != nil {
			return
		}
		logger.Info("control plane started", "elapsed", time.Since(start))
	}()
	ok = true
	return cp, nil
}

// Ready waits until the API server is ready and the scheduler and the
// controller manager run, and says why not where they do not.
func (cp *ControlPlane) Ready(ctx context.Context) error {
	select {
	case <-cp.ready:
		return cp.readyErr
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Errors delivers the error of a component that stopped on its own.
func (cp *ControlPlane) Errors() <-chan error { return cp.errs }

// Stop stops the components and etcd, and waits for them.
func (cp *ControlPlane) Stop() {
	cp.cancel()
	cp.wg.Wait()
	if cp.etcd != nil {
		cp.etcd.Close()
	}
	configz.Delete("componentconfig")
}

var setGatesOnce sync.Once

// setFeatureGates parses the feature gates once for the whole process: the
// three components share the global registry, and each would otherwise
// re-parse and fight over it.
func setFeatureGates(gates string) error {
	var err error
	setGatesOnce.Do(func() {
		fs := pflag.NewFlagSet("feature-gates", pflag.ContinueOnError)
		compatibility.DefaultComponentGlobalsRegistry.AddFlags(fs)
		if gates != "" {
			if err = fs.Parse([]string{"--feature-gates=" + gates}); err != nil {
				err = fmt.Errorf("parsing feature gates %q: %w", gates, err)
				return
			}
		}
		if err = compatibility.DefaultComponentGlobalsRegistry.Set(); err != nil {
			return
		}
		// As kube-apiserver's command does: the gates and the version in
		// its /metrics (kubernetes_feature_enabled), where tools such as
		// kubectl dra read which allocator features the cluster has.
		utilfeature.DefaultMutableFeatureGate.AddMetrics()
		compatibility.DefaultComponentGlobalsRegistry.AddMetrics()
	})
	return err
}

func (cp *ControlPlane) startEtcd(opts options.Options) (string, error) {
	// Clients reach etcd through a unix socket in the lab's private state
	// directory, not a loopback port any local user could open. A single
	// member has no peers: it listens for none, and its advertised peer
	// URL (the default) is never dialled.
	client := url.URL{Scheme: "unix", Path: opts.EtcdSocket}
	cfg := embed.NewConfig()
	cfg.Name = "dralab"
	cfg.Dir = opts.EtcdDir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = nil
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{opts.EtcdLog}
	// A lab is disposable: trade durability for speed.
	cfg.UnsafeNoFsync = true
	// One member, no peers: its election need not wait out a network's
	// heartbeats. At etcd's defaults (100 ms ticks, 1 s election) a new
	// member elects itself after a few ticks; at 10 ms ticks it does so
	// within tens of milliseconds.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", fmt.Errorf("starting etcd (log: %s): %w", opts.EtcdLog, err)
	}
	cp.etcd = e
	select {
	case <-e.Server.ReadyNotify():
		return client.String(), nil
	case err := <-e.Err():
		return "", fmt.Errorf("etcd failed (log: %s): %w", opts.EtcdLog, err)
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("etcd was not ready within 30s (log: %s)", opts.EtcdLog)
	}
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, opts options.Options, etcdURL string) error {
	s := apiserveroptions.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	port := opts.Listener.Addr().(*net.TCPAddr).Port
	p := opts.PKI
	args := []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// No default route on some hosts: do not reconcile the kubernetes
		// service's endpoints with a non-routable address.
		"--endpoint-reconciler-type=none",
		"--etcd-servers=" + etcdURL,
		"--client-ca-file=" + p.CACert,
		"--tls-cert-file=" + p.APIServerCert,
		"--tls-private-key-file=" + p.APIServerKey,
		"--kubelet-client-certificate=" + p.KubeletClientCert,
		"--kubelet-client-key=" + p.KubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-key-file=" + p.ServiceAccountKey,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--anonymous-auth=false",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		// Every resource.k8s.io version a 1.37 API server can still serve,
		// so that manifests written for 1.32–1.36 apply unchanged.
		"--runtime-config=" + strings.Trim(ServedResourceVersions+","+opts.RuntimeConfig, ","),
		"--profiling=false",
		// Stop in seconds instead of waiting for in-flight requests up to a minute.
		"--shutdown-send-retry-after=true",
	}
	if opts.AuditPolicy != "" {
		args = append(args,
			"--audit-policy-file="+opts.AuditPolicy,
			"--audit-log-path="+opts.AuditLog,
			"--audit-log-format=json",
			"--audit-log-maxsize=100",
			"--audit-log-maxbackup=1",
		)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kube-apiserver flags: %w", err)
	}
	s.SecureServing.Listener = opts.Listener
	s.SecureServing.BindPort = port

	completed, err := s.Complete(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return fmt.Errorf("kube-apiserver options: %w", errors.Join(errs...))
	}
	config, err := apiserverapp.NewConfig(completed)
	if err != nil {
		return fmt.Errorf("kube-apiserver config: %w", err)
	}
	config.KubeAPIs.Extra.KubeletClientConfig.Lookup = loopbackKubelets
	config.KubeAPIs.ControlPlane.Generic.DisabledPostStartHooks.Insert(replacedHooks...)
	completedConfig, err := config.Complete()
	if err != nil {
		return fmt.Errorf("kube-apiserver config: %w", err)
	}
	server, err := apiserverapp.CreateServerChain(completedConfig)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if err := addBootstrapHooks(server.GenericAPIServer); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	cp.run(ctx, "kube-apiserver", func(ctx context.Context) error { return prepared.Run(ctx) })
	return nil
}

func (cp *ControlPlane) startScheduler(ctx context.Context, opts options.Options) error {
	o := scheduleroptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range o.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--config=" + opts.SchedulerConfig,
		"--secure-port=0",
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kube-scheduler flags: %w", err)
	}
	cc, sched, err := schedulerapp.Setup(ctx, o)
	if err != nil {
		return fmt.Errorf("kube-scheduler: %w", err)
	}
	cp.run(ctx, "kube-scheduler", func(ctx context.Context) error { return schedulerapp.Run(ctx, cc, sched) })
	return nil
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, opts options.Options) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("kube-controller-manager options: %w", err)
	}
	all, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	p := opts.PKI
	args := []string{
		"--kubeconfig=" + opts.ControllerManagerKubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.ServiceAccountKey,
		"--root-ca-file=" + p.CACert,
		"--cluster-signing-cert-file=" + p.CACert,
		"--cluster-signing-key-file=" + p.CAKey,
		// The default 20/30 caps claim creation from templates at ~10 pods/s.
		"--kube-api-qps=" + strconv.Itoa(int(opts.ControllerManagerQPS)),
		"--kube-api-burst=" + strconv.Itoa(int(opts.ControllerManagerQPS)),
		"--concurrent-resourceclaim-syncs=" + strconv.Itoa(int(opts.ClaimWorkers)),
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	c, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		return fmt.Errorf("kube-controller-manager config: %w", err)
	}
	completed := c.Complete()
	cp.run(ctx, "kube-controller-manager", func(ctx context.Context) error { return kcmapp.Run(ctx, completed) })
	return nil
}

// run runs a component until ctx ends; a component that returns early
// reports its error.
func (cp *ControlPlane) run(ctx context.Context, name string, f func(context.Context) error) {
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		err := f(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		select {
		case cp.errs <- fmt.Errorf("%s: %w", name, err):
		default:
		}
	}()
}

// waitForServing waits until the API server answers the administrator's
// requests: its storage is up and it authenticates and authorizes, though
// its start-up hooks may still run.
func waitForServing(ctx context.Context, kubeconfig string, errs <-chan error) error {
	return waitForAdmin(ctx, kubeconfig, errs, "to serve", 20*time.Millisecond, func(ctx context.Context, client kubernetes.Interface) (bool, error) {
		_, err := client.Discovery().ServerVersion()
		return err == nil, err
	})
}

// waitForAPI waits until the API server is healthy and serves the default
// namespace, with the administrator's credentials.
func waitForAPI(ctx context.Context, kubeconfig string, errs <-chan error) error {
	return waitForAdmin(ctx, kubeconfig, errs, "to be ready", 50*time.Millisecond, func(ctx context.Context, client kubernetes.Interface) (bool, error) {
		status := 0
		res := client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status != 200 {
			return false, res.Error()
		}
		_, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// waitForAdmin polls check with the administrator's credentials every poll
// until it holds, for a minute at most, or until a component fails (errs).
// check's error is only remembered, for the message if time runs out.
func waitForAdmin(ctx context.Context, kubeconfig string, errs <-chan error, what string, poll time.Duration, check func(context.Context, kubernetes.Interface) (bool, error)) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 2 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, poll, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-errs:
			return false, err
		default:
		}
		done, err := check(ctx, client)
		if err != nil {
			last = err
		}
		return done, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("waiting for kube-apiserver %s: %w (last error: %v)", what, err, last)
	}
	return err
}

// loopbackKubelets dials every kubelet on 127.0.0.1. Lab kubelets listen on
// loopback only, while the kubelet must report a non-loopback node IP (it
// refuses loopback), so the address the API server reads from the Node
// object is kept for its port and replaced for its host.
func loopbackKubelets(egressselector.NetworkContext) (utilnet.DialFunc, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}, nil
}
