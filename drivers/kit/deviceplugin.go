package kit

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DevicePluginOptions configure counting mode: the inventory served
// through the kubelet's device-plugin API as an extended resource, the way
// GPU device plugins count. A node must never serve the same devices
// through this API and DRA: the two allocators do not know of each other.
type DevicePluginOptions struct {
	// ResourceName is the extended resource, e.g. "dralab.dev/gpu".
	ResourceName string
	// Dir is the kubelet's device-plugin directory, holding kubelet.sock.
	Dir string
	// Socket is the plugin's socket file name in Dir.
	Socket    string
	EnvPrefix string
	Inventory Inventory
}

// DevicePlugin is a running device plugin.
type DevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	opts    DevicePluginOptions
	devices map[string]Device
	ids     []string
	server  *grpc.Server
	// registered: the kubelet accepted a registration.
	registered atomic.Bool
}

// StartDevicePlugin serves the device-plugin API and registers with the
// kubelet, again whenever the kubelet restarts (its socket is recreated).
func StartDevicePlugin(ctx context.Context, opts DevicePluginOptions) (*DevicePlugin, error) {
	devs, err := opts.Inventory.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("enumerating devices: %w", err)
	}
	p := &DevicePlugin{opts: opts, devices: map[string]Device{}, server: grpc.NewServer()}
	for _, d := range devs {
		p.devices[d.API.Name] = d
		p.ids = append(p.ids, d.API.Name)
	}
	sortDeviceNames(p.ids)
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, err
	}
	socket := filepath.Join(opts.Dir, opts.Socket)
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("device plugin socket: %w", err)
	}
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(l) }()
	go p.registerLoop(ctx)
	return p, nil
}

// Stop stops serving.
func (p *DevicePlugin) Stop() { p.server.Stop() }

func (p *DevicePlugin) registerLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	kubelet := filepath.Join(p.opts.Dir, "kubelet.sock")
	var registered os.FileInfo
	for {
		info, err := os.Stat(kubelet)
		if err == nil && (registered == nil || !os.SameFile(info, registered)) {
			if err := p.register(ctx, kubelet); err != nil {
				logger.Error(err, "Registering with the kubelet; will retry")
			} else {
				registered = info
				p.registered.Store(true)
				logger.Info("Registered with the kubelet's device manager", "resource", p.opts.ResourceName, "devices", len(p.ids))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (p *DevicePlugin) register(ctx context.Context, kubeletSocket string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.opts.Socket,
		ResourceName: p.opts.ResourceName,
	})
	return err
}

// GetDevicePluginOptions implements the device-plugin API.
func (p *DevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices, all healthy, and keeps the stream open.
func (p *DevicePlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range p.ids {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Allocate sets each container's environment for the devices the kubelet
// chose, with the same variables a DRA claim sets.
func (p *DevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		envs := map[string]string{}
		for n, id := range cr.DevicesIds {
			dev, ok := p.devices[id]
			if !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			for _, kv := range deviceEnv(p.opts.EnvPrefix, n, dev) {
				envs[kv[0]] = kv[1]
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs})
	}
	return resp, nil
}

// deviceEnv is the environment of a claim's or container's n-th device:
// <prefix>_<n>=<Env[""]>, then <prefix>_<n>_<key>=<value>, sorted.
func deviceEnv(prefix string, n int, dev Device) [][2]string {
	keys := make([]string, 0, len(dev.Env))
	for k := range dev.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	base := prefix + "_" + strconv.Itoa(n)
	out := make([][2]string, 0, len(keys))
	for _, k := range keys {
		name := base
		if k != "" {
			name += "_" + k
		}
		out = append(out, [2]string{name, dev.Env[k]})
	}
	return out
}
