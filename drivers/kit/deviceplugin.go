package kit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
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
	// nodeEdits are a node-wide inventory's edits (a GPU driver's control
	// device files), which every container with a device gets.
	nodeEdits ContainerEdits
	server    *grpc.Server
	// socket is the path the plugin serves on.
	socket string
	// registered: the kubelet accepted a registration.
	registered atomic.Bool

	// lisMu guards the listener: the registration loop replaces it while
	// Stop may close it.
	lisMu   sync.Mutex
	lis     net.Listener
	served  os.FileInfo
	stopped bool

	mu sync.Mutex
	// faults are the failed devices, reported Unhealthy.
	faults map[string]DeviceFault
	// changed is closed and replaced on every change of faults.
	changed chan struct{}
}

// DeviceHealthSetter is what a driver's health monitor reports failed
// devices to: a DRA Driver (its health stream and its slices' taints) or
// a DevicePlugin (ListAndWatch).
type DeviceHealthSetter interface {
	SetDeviceHealth(ctx context.Context, faults map[string]DeviceFault) error
}

var (
	_ DeviceHealthSetter = &Driver{}
	_ DeviceHealthSetter = &DevicePlugin{}
)

// StartDevicePlugin serves the device-plugin API and registers with the
// kubelet, again whenever the kubelet restarts (its socket is recreated).
func StartDevicePlugin(ctx context.Context, opts DevicePluginOptions) (*DevicePlugin, error) {
	devs, err := opts.Inventory.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("enumerating devices: %w", err)
	}
	p := &DevicePlugin{opts: opts, devices: map[string]Device{}, server: grpc.NewServer(), faults: map[string]DeviceFault{}, changed: make(chan struct{})}
	if nw, ok := opts.Inventory.(NodeWideInventory); ok {
		p.nodeEdits = nw.NodeEdits()
	}
	for _, d := range devs {
		p.devices[d.API.Name] = d
		p.ids = append(p.ids, d.API.Name)
	}
	sortDeviceNames(p.ids)
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, err
	}
	p.socket = filepath.Join(opts.Dir, opts.Socket)
	pluginapi.RegisterDevicePluginServer(p.server, p)
	if err := p.listen(); err != nil {
		return nil, err
	}
	go p.registerLoop(ctx)
	return p, nil
}

// Stop stops serving and removes the plugin's socket.
func (p *DevicePlugin) Stop() {
	p.lisMu.Lock()
	defer p.lisMu.Unlock()
	p.stopped = true
	p.server.Stop()
	if info, err := os.Stat(p.socket); err == nil && os.SameFile(info, p.served) {
		_ = os.Remove(p.socket)
	}
}

// listen serves the API on a new socket at the plugin's path, in place of
// the one it served on, if any.
func (p *DevicePlugin) listen() error {
	p.lisMu.Lock()
	defer p.lisMu.Unlock()
	if p.stopped {
		return errors.New("device plugin stopped")
	}
	if p.lis != nil {
		_ = p.lis.Close()
	}
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("device plugin socket: %w", err)
	}
	// The file at the path may be another listener's by the time this one
	// closes: Stop removes the socket if it is still this plugin's.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	info, err := os.Stat(p.socket)
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("device plugin socket: %w", err)
	}
	p.lis, p.served = l, info
	go func() { _ = p.server.Serve(l) }()
	return nil
}

// lost reports whether the plugin's socket is no longer the file it
// serves on: the kubelet's device manager removes every socket in its
// directory when it starts, a plugin's too, so a plugin started before
// the kubelet (as a lab starts its node's driver) or across a kubelet
// restart must serve on a new socket before it registers.
func (p *DevicePlugin) lost() bool {
	p.lisMu.Lock()
	defer p.lisMu.Unlock()
	info, err := os.Stat(p.socket)
	return !p.stopped && (err != nil || !sameSocket(info, p.served))
}

// sameSocket tells whether two looks at a socket's path saw the same
// socket: the same file, made at the same time. A socket removed and made
// again (a kubelet that restarted) may get the inode number the old one
// had, so the file's identity alone does not tell.
func sameSocket(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

func (p *DevicePlugin) registerLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	kubelet := filepath.Join(p.opts.Dir, "kubelet.sock")
	var registered os.FileInfo
	for {
		if p.lost() {
			logger.Info("The device plugin's socket was removed (the kubelet's device manager started); serving on a new one", "socket", p.socket)
			p.registered.Store(false)
			registered = nil
			if err := p.listen(); err != nil {
				logger.Error(err, "Serving the device plugin again; will retry")
			}
		}
		info, err := os.Stat(kubelet)
		if err == nil && (registered == nil || !sameSocket(info, registered)) {
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

// SetDeviceHealth replaces the plugin's record of failed devices, which
// ListAndWatch reports Unhealthy at once: the kubelet then counts them out
// of the node's allocatable. Devices the inventory does not have are an
// error, and nothing changes.
func (p *DevicePlugin) SetDeviceHealth(ctx context.Context, faults map[string]DeviceFault) error {
	for name := range faults {
		if _, ok := p.devices[name]; !ok {
			return fmt.Errorf("device health: %q is not a device of this node (%d devices)", name, len(p.devices))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if maps.EqualFunc(p.faults, faults, func(a, b DeviceFault) bool { return a.Message == b.Message }) {
		return nil
	}
	p.faults = maps.Clone(faults)
	if p.faults == nil {
		p.faults = map[string]DeviceFault{}
	}
	close(p.changed)
	p.changed = make(chan struct{})
	klog.FromContext(ctx).Info("Device health changed", "failed", slices.Sorted(maps.Keys(p.faults)))
	return nil
}

// ListAndWatch sends the devices with their health, and again on every
// change, until the kubelet closes the stream.
func (p *DevicePlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, id := range p.ids {
			health := pluginapi.Healthy
			if _, failed := p.faults[id]; failed {
				health = pluginapi.Unhealthy
			}
			resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: health})
		}
		changed := p.changed
		p.mu.Unlock()
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// Allocate gives each container what a DRA claim of the devices the
// kubelet chose gives it: the same variables (the devices' own, and those
// set once for all of them, NVIDIA_VISIBLE_DEVICES on an NVML node), the
// devices' files and the node-wide control files.
func (p *DevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		envs := map[string]string{}
		var specs []*pluginapi.DeviceSpec
		var devs []Device
		for n, id := range cr.DevicesIds {
			dev, ok := p.devices[id]
			if !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			for _, kv := range deviceEnv(p.opts.EnvPrefix, n, dev) {
				envs[kv[0]] = kv[1]
			}
			specs = append(specs, deviceSpecs(dev.DeviceNodes)...)
			devs = append(devs, dev)
		}
		maps.Copy(envs, claimEnv(devs))
		if len(devs) > 0 {
			maps.Copy(envs, p.nodeEdits.Env)
			specs = append(specs, deviceSpecs(p.nodeEdits.DeviceNodes)...)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs, Devices: specs})
	}
	return resp, nil
}

// deviceSpecs are device files as the device-plugin API gives them to a
// container: at their path, from the host's file, read and written.
func deviceSpecs(nodes []DeviceNode) []*pluginapi.DeviceSpec {
	var out []*pluginapi.DeviceSpec
	for _, n := range nodes {
		out = append(out, &pluginapi.DeviceSpec{ContainerPath: n.Path, HostPath: cmp.Or(n.HostPath, n.Path), Permissions: "rw"})
	}
	return out
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
