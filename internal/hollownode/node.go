// Package hollownode runs one lab node: the real kubelet as kubemark builds
// it (fake cAdvisor, fake mounter, fake container runtime), with the real
// kubelet DRA manager wired in and a fake runtime that resolves CDI devices.
// DRA kubelet plugins register in the node's plugins_registry and the kubelet
// calls their NodePrepareResources and NodeUnprepareResources like on any
// node.
//
// A process runs one node: a second kubelet in one process panics on
// duplicate metrics registration.
package hollownode

import (
	"context"
	"fmt"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/configz"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	"maps"
	"net/http"
	"os"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/pkg/kubemark"

	"github.com/dralab/dralab/internal/labstate"
)

// Options describe a node.
type Options struct {
	Name string
	Dir  labstate.NodeDir
	// Port is the kubelet's HTTPS port on 127.0.0.1.
	Port int
	// CACert verifies clients of the kubelet's API (the API server).
	CACert string
	Labels map[string]string
	// Taints are the taints the kubelet registers the node with.
	Taints []v1.Taint
	// QPS and Burst of the kubelet's API client.
	QPS   float32
	Burst int
	// FeatureGates are the lab's, as the control plane has them.
	FeatureGates map[string]bool
	// Memory is the node's memory in bytes, its capacity and allocatable;
	// 0: kubemark's 3840Mi. CPUs its logical CPUs; 0: kubemark's 1.
	Memory int64
	CPUs   int
}

// machine is kubemark's fake cAdvisor with the node's memory and CPUs.
type machine struct {
	*cadvisortest.Fake
	memory int64
	cpus   int
}

// MachineInfo reports the node's memory and CPUs in place of kubemark's.
func (m machine) MachineInfo(logger klog.Logger) (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo(logger)
	if err != nil {
		return info, err
	}
	if m.memory > 0 {
		info.MemoryCapacity = uint64(m.memory)
	}
	if m.cpus > 0 {
		info.NumCores = m.cpus
	}
	return info, nil
}

// Run runs the node until ctx ends or the kubelet fails.
func Run(ctx context.Context, o Options) error {
	logger := klog.FromContext(ctx).WithValues("node", o.Name)
	ctx = klog.NewContext(ctx, logger)
	// The kubelet reads the process's gates, which its command would set
	// from its configuration; RunKubelet does not.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(o.FeatureGates); err != nil {
		return fmt.Errorf("node %s feature gates: %w", o.Name, err)
	}
	for _, d := range []string{o.Dir.KubeletRoot(), o.Dir.PluginsRegistry(), o.Dir.Plugins(), o.Dir.CDI(), o.Dir.CertDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}

	clientConfig, err := clientcmd.BuildConfigFromFlags("", o.Dir.Kubeconfig())
	if err != nil {
		return fmt.Errorf("node %s kubeconfig: %w", o.Name, err)
	}
	clientConfig.UserAgent = "dralab-hollow-kubelet/" + o.Name
	clientConfig.ContentType = "application/vnd.kubernetes.protobuf"
	clientConfig.QPS, clientConfig.Burst = o.QPS, o.Burst
	clientConfig.Wrap(func(rt http.RoundTripper) http.RoundTripper { return newReadyGate(rt, clientConfig.Host, o.Name) })
	client, err := clientset.NewForConfig(clientConfig)
	if err != nil {
		return err
	}

	flags, config, err := kubeletConfig(o)
	if err != nil {
		return err
	}

	heartbeatConfig := *clientConfig
	heartbeatConfig.Timeout = 10 * time.Second
	heartbeatConfig.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeatConfig)
	if err != nil {
		return err
	}

	rt, err := newRuntime(o.Dir.CDI(), func(ctx context.Context, namespace, name string) (*v1.Pod, error) {
		return client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return err
	}
	if err := rt.serve(o.Dir.CRISocket()); err != nil {
		return err
	}
	defer rt.stop()
	endpoint := "unix://" + o.Dir.CRISocket()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the node's runtime: %w", err)
	}
	imageService, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the node's image service: %w", err)
	}

	draManager, err := dra.NewManager(logger, client, flags.RootDirectory)
	if err != nil {
		return fmt.Errorf("creating the DRA manager: %w", err)
	}
	// dra_resource_claims_in_use on the kubelet's /metrics, which the
	// kubelet's Linux container manager registers and the stub does not.
	kubeletmetrics.RegisterCollectors(draManager.NewMetricsCollector())
	devicePlugins, err := startDevicePlugins(ctx, o.Dir.DevicePlugins())
	if err != nil {
		return err
	}
	defer devicePlugins.stop()
	containerManager := newDRAContainerManager(cm.NewStubContainerManager(), draManager, devicePlugins)

	hk := kubemark.NewHollowKubelet(flags, config, client, heartbeatClient,
		machine{Fake: &cadvisortest.Fake{NodeName: o.Name}, memory: o.Memory, cpus: o.CPUs}, imageService, runtimeService, containerManager)
	recorder, stopRecorder := warningRecorder(ctx, client, o.Name)
	defer stopRecorder()
	hk.KubeletDeps.Recorder = recorder

	// kubemark serves the kubelet API over plain HTTP without
	// authentication; a lab node serves TLS and authenticates and
	// authorizes its callers like a real kubelet.
	tls, err := kubeletapp.InitializeTLS(ctx, flags, config)
	if err != nil {
		return fmt.Errorf("kubelet TLS: %w", err)
	}
	hk.KubeletDeps.TLSOptions = tls
	auth, runCAReload, err := kubeletapp.BuildAuth(types.NodeName(o.Name), client, *config)
	if err != nil {
		return fmt.Errorf("kubelet authentication: %w", err)
	}
	hk.KubeletDeps.Auth = auth
	runCAReload(ctx.Done())

	if err := serveConfigz(config); err != nil {
		return err
	}
	logger.Info("Starting hollow kubelet", "port", o.Port, "root", flags.RootDirectory)
	// RunKubelet starts the kubelet's loops and returns.
	if err := kubeletapp.RunKubelet(ctx, &options.KubeletServer{KubeletFlags: *flags, KubeletConfiguration: *config}, hk.KubeletDeps); err != nil {
		return fmt.Errorf("running the kubelet: %w", err)
	}
	<-ctx.Done()
	logger.Info("Stopping hollow kubelet")
	return nil
}

// kubeletConfig is kubemark's hollow kubelet configuration, with the node's
// own directories, loopback-only serving and authenticated access.
func kubeletConfig(o Options) (*options.KubeletFlags, *kubeletconfig.KubeletConfiguration, error) {
	f := options.NewKubeletFlags()
	f.RootDirectory = o.Dir.KubeletRoot()
	f.CertDirectory = o.Dir.CertDir()
	f.HostnameOverride = o.Name
	// The kubelet refuses a loopback node IP and picks the host's; it still
	// listens on loopback only, where the API server dials it.
	f.MinimumGCAge = metav1.Duration{Duration: time.Minute}
	f.MaxContainerCount = 100
	f.MaxPerPodContainerCount = 2
	f.NodeLabels = maps.Clone(o.Labels)

	c, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, nil, err
	}
	endpoint := "unix://" + o.Dir.CRISocket()
	c.ContainerRuntimeEndpoint = endpoint
	c.ImageServiceEndpoint = endpoint
	c.FeatureGates = maps.Clone(o.FeatureGates)
	c.RegisterWithTaints = o.Taints
	c.StaticPodURL = ""
	c.StaticPodPath = ""
	c.EnableServer = true
	c.Address = "127.0.0.1"
	c.Port = int32(o.Port)
	c.ReadOnlyPort = 0
	c.HealthzPort = 0
	c.Authentication.Anonymous.Enabled = false
	c.Authentication.Webhook.Enabled = true
	c.Authentication.X509.ClientCAFile = o.CACert
	c.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
	c.FileCheckFrequency.Duration = 20 * time.Second
	c.HTTPCheckFrequency.Duration = 20 * time.Second
	// Status is computed every 2s (a real kubelet: 10s) and written only
	// when it changes: device-plugin capacity shows within seconds of the
	// plugin's registration, at no API cost while nothing changes.
	c.NodeStatusUpdateFrequency.Duration = 2 * time.Second
	c.NodeStatusReportFrequency.Duration = 5 * time.Minute
	c.SyncFrequency.Duration = 10 * time.Second
	c.EvictionPressureTransitionPeriod.Duration = 5 * time.Minute
	c.MaxPods = 110
	c.PodsPerCore = 0
	c.ClusterDNS = []string{}
	c.ImageGCHighThresholdPercent = 90
	c.ImageGCLowThresholdPercent = 80
	c.ProviderID = "dralab://" + o.Name
	c.VolumeStatsAggPeriod.Duration = time.Minute
	c.CgroupRoot = ""
	c.CPUCFSQuota = true
	c.EnableControllerAttachDetach = false
	c.EnableDebuggingHandlers = true
	c.CgroupsPerQOS = false
	c.HairpinMode = kubeletconfig.HairpinVeth
	// A hollow node has no network of its own: its kubelet must not add
	// chains to the host's iptables (as root it would, and no one would
	// remove them).
	c.MakeIPTablesUtilChains = false
	c.MaxOpenFiles = 1024
	c.RegistryBurst = 10
	c.RegistryPullQPS = 5.0
	c.ResolverConfig = kubetypes.ResolvConfDefault
	c.KubeletCgroups = "/kubelet"
	c.SerializeImagePulls = true
	c.SystemCgroups = ""
	c.ProtectKernelDefaults = false
	c.RegisterNode = true
	c.LocalStorageCapacityIsolation = true
	c.PodLogsDir = o.Dir.KubeletRoot() + "/pod-logs"
	c.FailCgroupV1 = false
	return f, c, nil
}

// serveConfigz publishes the kubelet's configuration at /configz, as the
// kubelet command does and RunKubelet does not: `kubectl get --raw
// /api/v1/nodes/NODE/proxy/configz` shows it (its feature gates
// included), as on any node.
func serveConfigz(c *kubeletconfig.KubeletConfiguration) error {
	cz, err := configz.New("kubeletconfig")
	if err != nil {
		return fmt.Errorf("kubelet configz: %w", err)
	}
	scheme, _, err := kubeletscheme.NewSchemeAndCodecs()
	if err != nil {
		return err
	}
	var versioned kubeletconfigv1beta1.KubeletConfiguration
	if err := scheme.Convert(c, &versioned, nil); err != nil {
		return fmt.Errorf("kubelet configz: %w", err)
	}
	versioned.APIVersion, versioned.Kind = kubeletconfigv1beta1.SchemeGroupVersion.String(), "KubeletConfiguration"
	return cz.Set(&versioned)
}
