package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dralab/dralab/lab"
)

// testPlugin is the smallest DRA kubelet plugin that proves the node's
// side of DRA: it publishes devices, and on NodePrepareResources writes one
// CDI spec per claim whose devices set an environment variable; it records
// every call so that tests can assert the kubelet made it.
type testPlugin struct {
	driver string
	node   string
	cdi    *cdi.Cache
	helper *kubeletplugin.Helper

	mu         sync.Mutex
	prepared   map[types.UID]int
	unprepared map[types.UID]int
}

// testEnvVar is set in a container by each device of the test plugin.
const testEnvVar = "DRALAB_TEST_DEVICE"

func startTestPlugin(ctx context.Context, client kubernetes.Interface, driver string, node lab.NodeStatus, devices []string) (*testPlugin, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(node.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, err
	}
	pluginDir := filepath.Join(node.PluginsDir, driver)
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		return nil, err
	}
	p := &testPlugin{driver: driver, node: node.Name, cdi: cache, prepared: map[types.UID]int{}, unprepared: map[types.UID]int{}}
	helper, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node.Name),
		kubeletplugin.DriverName(driver),
		kubeletplugin.RegistrarDirectoryPath(node.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the test kubelet plugin: %w", err)
	}
	p.helper = helper
	var devs []resourceapi.Device
	for _, d := range devices {
		devs = append(devs, resourceapi.Device{
			Name:       d,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("test")}},
		})
	}
	err = helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{node.Name: {Slices: []resourceslice.Slice{{Devices: devs}}}},
	})
	if err != nil {
		helper.Stop()
		return nil, fmt.Errorf("publishing the test plugin's devices: %w", err)
	}
	return p, nil
}

func (p *testPlugin) stop() { p.helper.Stop() }

func (p *testPlugin) calls(uid types.UID) (prepared, unprepared int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prepared[uid], p.unprepared[uid]
}

func (p *testPlugin) specName(uid types.UID) string {
	return fmt.Sprintf("%s-%s.json", p.driver, uid)
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *testPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		spec := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: p.driver + "/device"}
		var devices []kubeletplugin.Device
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != p.driver {
				continue
			}
			name := string(claim.UID) + "-" + r.Device
			spec.Devices = append(spec.Devices, cdispec.Device{
				Name:           name,
				ContainerEdits: cdispec.ContainerEdits{Env: []string{testEnvVar + "=" + r.Device}},
			})
			devices = append(devices, kubeletplugin.Device{
				Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{spec.Kind + "=" + name},
			})
		}
		if err := p.cdi.WriteSpec(spec, p.specName(claim.UID)); err != nil {
			results[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices}
		p.mu.Lock()
		p.prepared[claim.UID]++
		p.mu.Unlock()
	}
	return results, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *testPlugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := map[types.UID]error{}
	for _, c := range claims {
		results[c.UID] = p.cdi.RemoveSpec(p.specName(c.UID))
		p.mu.Lock()
		p.unprepared[c.UID]++
		p.mu.Unlock()
	}
	return results, nil
}

// HandleError implements kubeletplugin.DRAPlugin.
func (p *testPlugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin; the health service
// is off, so it is never called.
func (p *testPlugin) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}
