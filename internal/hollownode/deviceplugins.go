package hollownode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// devicePlugins is the hollow node's side of the device-plugin API: the
// kubelet's real device manager binds a fixed host path
// (/var/lib/kubelet/device-plugins/kubelet.sock), so several nodes on one
// host cannot each run one. The hollow node serves the same Registration
// service in its own device-plugin directory, follows each plugin's
// ListAndWatch, and advertises the healthy devices as the node's extended
// resource capacity, as the device manager does. It does not assign device
// IDs to containers (no Allocate): on hollow nodes counting is what the
// scheduler sees, which is what the counting scenario is about.
type devicePlugins struct {
	pluginapi.UnimplementedRegistrationServer
	dir    string
	server *grpc.Server
	ctx    context.Context

	mu     sync.Mutex
	counts map[string]int
}

func startDevicePlugins(ctx context.Context, dir string) (*devicePlugins, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "kubelet.sock")
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("device-plugin registration socket: %w", err)
	}
	dp := &devicePlugins{dir: dir, server: grpc.NewServer(), ctx: ctx, counts: map[string]int{}}
	pluginapi.RegisterRegistrationServer(dp.server, dp)
	go func() { _ = dp.server.Serve(l) }()
	return dp, nil
}

func (dp *devicePlugins) stop() { dp.server.Stop() }

// Register implements the kubelet's Registration service.
func (dp *devicePlugins) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("device plugin API version %q is not supported; want %q", req.Version, pluginapi.Version)
	}
	if filepath.Base(req.Endpoint) != req.Endpoint {
		return nil, fmt.Errorf("endpoint %q must be a file name in %s", req.Endpoint, dp.dir)
	}
	klog.FromContext(dp.ctx).Info("Device plugin registered", "resource", req.ResourceName, "endpoint", req.Endpoint)
	go dp.follow(req.ResourceName, filepath.Join(dp.dir, req.Endpoint))
	return &pluginapi.Empty{}, nil
}

// follow keeps the resource's count current from the plugin's ListAndWatch
// stream; a plugin that goes away leaves zero healthy devices.
func (dp *devicePlugins) follow(resourceName, socket string) {
	logger := klog.FromContext(dp.ctx).WithValues("resource", resourceName)
	defer dp.set(resourceName, 0)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		logger.Error(err, "Connecting to device plugin")
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(dp.ctx)
	defer cancel()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		logger.Error(err, "ListAndWatch")
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			logger.Info("Device plugin stream ended", "err", err)
			return
		}
		healthy := 0
		for _, d := range resp.Devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		logger.V(1).Info("Device plugin devices", "healthy", healthy, "total", len(resp.Devices))
		dp.set(resourceName, healthy)
	}
}

func (dp *devicePlugins) set(resourceName string, n int) {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	dp.counts[resourceName] = n
}

// capacity is what the kubelet's node status reports for device plugins.
func (dp *devicePlugins) capacity() (v1.ResourceList, v1.ResourceList, []string) {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	capacity, allocatable := v1.ResourceList{}, v1.ResourceList{}
	for name, n := range dp.counts {
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	return capacity, allocatable, nil
}
