package hollownode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/klog/v2"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// runtime is a fake CRI runtime that does what a real runtime does with CDI:
// it resolves the container's CDI devices from the node's CDI spec directory
// with the CDI library (the one containerd uses) and fails the container
// when a device does not resolve. No process runs; instead the container
// "prints its environment": its log holds the environment after CDI
// injection, so `kubectl logs` shows what a real container would see, and
// then each device metadata file that CDI mounts into it (a DRA driver's
// device metadata) as `<path in the container>=<the file's first JSON
// object on one line>`.
type runtime struct {
	*fakeremote.RemoteRuntime
	cdi    *cdi.Cache
	server *grpc.Server
	// pod reads a pod from the API server, to tell init containers.
	pod func(ctx context.Context, namespace, name string) (*v1.Pod, error)

	mu sync.Mutex
	// runToCompletion are the containers that exit once started: init
	// containers, which a real runtime runs until their command exits.
	runToCompletion map[string]bool
}

func newRuntime(cdiDir string, pod func(ctx context.Context, namespace, name string) (*v1.Pod, error)) (*runtime, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("creating CDI cache for %s: %w", cdiDir, err)
	}
	r := &runtime{RemoteRuntime: fakeremote.NewFakeRemoteRuntime(), cdi: cache, server: grpc.NewServer(), pod: pod, runToCompletion: map[string]bool{}}
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{
		Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		},
	}
	// The kubelet rejects an image whose size is unknown (zero).
	r.ImageService.SetFakeImageSize(4 << 20)
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	runtimeapi.RegisterImageServiceServer(r.server, r)
	return r, nil
}

// serve listens on a unix socket until Stop.
func (r *runtime) serve(socket string) error {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", socket, err)
	}
	go func() { _ = r.server.Serve(l) }()
	return nil
}

func (r *runtime) stop() { r.server.Stop() }

// CreateContainer injects CDI devices like a real runtime before creating
// the container.
func (r *runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	env, err := r.containerEnv(ctx, req.Config)
	if err != nil {
		return nil, err
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	initContainer, err := r.isInitContainer(ctx, req.Config)
	if err != nil {
		return nil, err
	}
	if initContainer {
		r.mu.Lock()
		r.runToCompletion[resp.ContainerId] = true
		r.mu.Unlock()
	}
	if dir := req.GetSandboxConfig().GetLogDirectory(); dir != "" && req.Config.GetLogPath() != "" {
		logPath := filepath.Join(dir, req.Config.GetLogPath())
		if err := writeLog(logPath, env); err != nil {
			return nil, fmt.Errorf("writing container log: %w", err)
		}
		r.RuntimeService.Lock()
		if c, ok := r.RuntimeService.Containers[resp.ContainerId]; ok {
			c.LogPath = logPath
		}
		r.RuntimeService.Unlock()
	}
	return resp, nil
}

// StartContainer starts a container; an init container's command "runs"
// at once and exits 0 (its log is its environment, like every
// container's), so that the kubelet goes on to the next init container
// and then to the app containers, as with a real runtime.
func (r *runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	exits := r.runToCompletion[req.ContainerId]
	delete(r.runToCompletion, req.ContainerId)
	r.mu.Unlock()
	if exits {
		r.RuntimeService.Lock()
		if c, ok := r.RuntimeService.Containers[req.ContainerId]; ok {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			c.FinishedAt = time.Now().UnixNano()
			c.ExitCode = 0
			c.Reason = "Completed"
		}
		r.RuntimeService.Unlock()
	}
	return resp, nil
}

// isInitContainer tells, from the pod, whether a container is an init
// container that runs to completion (not a sidecar, which keeps running).
func (r *runtime) isInitContainer(ctx context.Context, cfg *runtimeapi.ContainerConfig) (bool, error) {
	labels := cfg.GetLabels()
	ns, name, container := labels[kubelettypes.KubernetesPodNamespaceLabel], labels[kubelettypes.KubernetesPodNameLabel], labels[kubelettypes.KubernetesContainerNameLabel]
	if r.pod == nil || ns == "" || name == "" {
		return false, nil
	}
	pod, err := r.pod(ctx, ns, name)
	if err != nil {
		return false, fmt.Errorf("reading pod %s/%s for container %s: %w", ns, name, container, err)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == container {
			return c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways, nil
		}
	}
	return false, nil
}

// containerEnv returns the container's environment after CDI injection.
func (r *runtime) containerEnv(ctx context.Context, cfg *runtimeapi.ContainerConfig) ([]string, error) {
	spec := &oci.Spec{Process: &oci.Process{}}
	for _, kv := range cfg.GetEnvs() {
		spec.Process.Env = append(spec.Process.Env, kv.Key+"="+string(kv.Value))
	}
	var devices []string
	for _, d := range cfg.GetCDIDevices() {
		devices = append(devices, d.Name)
	}
	if len(devices) > 0 {
		if err := r.cdi.Refresh(); err != nil {
			klog.FromContext(ctx).Error(err, "Some CDI specs are invalid")
		}
		if unresolved, err := r.cdi.InjectDevices(spec, devices...); err != nil {
			return nil, fmt.Errorf("CDI devices %v of container %s: %w", unresolved, cfg.GetMetadata().GetName(), err)
		}
		klog.FromContext(ctx).V(2).Info("Injected CDI devices", "container", cfg.GetMetadata().GetName(), "devices", devices)
	}
	env := slices.Clone(spec.Process.Env)
	slices.Sort(env)
	files, err := metadataFiles(spec.Mounts)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", cfg.GetMetadata().GetName(), err)
	}
	return append(env, files...), nil
}

// metadataFiles reads the device metadata files a container's CDI edits
// mount (sources on the node, destinations under the metadata directory),
// sorted by destination: a file is a JSON stream of one object per API
// version, newest first, and the line holds the first.
func metadataFiles(mounts []oci.Mount) ([]string, error) {
	var lines []string
	for _, m := range mounts {
		if !strings.HasPrefix(m.Destination, metadata.ContainerDir+"/") {
			continue
		}
		data, err := os.ReadFile(m.Source)
		if err != nil {
			return nil, fmt.Errorf("device metadata file %s: %w", m.Destination, err)
		}
		var first json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&first); err != nil {
			return nil, fmt.Errorf("device metadata file %s (%s): %w", m.Destination, m.Source, err)
		}
		var line bytes.Buffer
		if err := json.Compact(&line, first); err != nil {
			return nil, err
		}
		lines = append(lines, m.Destination+"="+line.String())
	}
	slices.Sort(lines)
	return lines, nil
}

// writeLog writes lines in the CRI log format the kubelet reads.
func writeLog(path string, lines []string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", ts, l)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
