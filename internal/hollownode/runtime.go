package hollownode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// runtime is a fake CRI runtime that does what a real runtime does with CDI:
// it resolves the container's CDI devices from the node's CDI spec directory
// with the CDI library (the one containerd uses) and fails the container
// when a device does not resolve. No process runs; instead the container
// "prints its environment": its log holds the environment after CDI
// injection, so `kubectl logs` shows what a real container would see.
type runtime struct {
	*fakeremote.RemoteRuntime
	cdi    *cdi.Cache
	server *grpc.Server
}

func newRuntime(cdiDir string) (*runtime, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("creating CDI cache for %s: %w", cdiDir, err)
	}
	r := &runtime{RemoteRuntime: fakeremote.NewFakeRemoteRuntime(), cdi: cache, server: grpc.NewServer()}
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
	return env, nil
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
