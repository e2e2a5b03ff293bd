package hollownode

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/cm/resourceupdates"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/kubelet/status"
	"k8s.io/utils/ptr"
)

// draContainerManager is kubemark's stub container manager with the real
// kubelet DRA manager wired in, the way the kubelet's Linux container manager
// wires it: the plugin watcher registers DRA kubelet plugins with it, pod
// admission prepares claims through it, and containers get its CDI devices.
// The stub alone registers no DRA handler, so pods would run with no claim
// prepared.
type draContainerManager struct {
	cm.ContainerManager
	dra           *dra.Manager
	devicePlugins *devicePlugins
}

var _ cm.ContainerManager = &draContainerManager{}

func newDRAContainerManager(stub cm.ContainerManager, dm *dra.Manager, dp *devicePlugins) *draContainerManager {
	return &draContainerManager{ContainerManager: stub, dra: dm, devicePlugins: dp}
}

// GetDevicePluginResourceCapacity reports what registered device plugins
// serve, for the node's capacity and allocatable.
func (m *draContainerManager) GetDevicePluginResourceCapacity(klog.Logger) (v1.ResourceList, v1.ResourceList, []string) {
	return m.devicePlugins.capacity()
}

func (m *draContainerManager) Start(ctx context.Context, node *v1.Node, activePods cm.ActivePodsFunc, getNode cm.GetNodeFunc, sourcesReady config.SourcesReady, podStatusProvider status.PodStatusProvider, runtimeService internalapi.RuntimeService, localStorageCapacityIsolation bool) error {
	if err := m.ContainerManager.Start(ctx, node, activePods, getNode, sourcesReady, podStatusProvider, runtimeService, localStorageCapacityIsolation); err != nil {
		return err
	}
	if err := m.dra.Start(ctx, dra.ActivePodsFunc(activePods), dra.GetNodeFunc(getNode), sourcesReady); err != nil {
		return fmt.Errorf("starting the DRA manager: %w", err)
	}
	return nil
}

func (m *draContainerManager) GetPluginRegistrationHandlers() map[string]cache.PluginHandler {
	handlers := map[string]cache.PluginHandler{}
	for k, v := range m.ContainerManager.GetPluginRegistrationHandlers() {
		handlers[k] = v
	}
	handlers[pluginwatcherapi.DRAPlugin] = m.dra.GetWatcherHandler()
	return handlers
}

func (m *draContainerManager) GetResources(ctx context.Context, pod *v1.Pod, container *v1.Container) (*kubecontainer.RunContainerOptions, error) {
	opts, err := m.ContainerManager.GetResources(ctx, pod, container)
	if err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &kubecontainer.RunContainerOptions{}
	}
	info, err := m.dra.GetResources(pod, container)
	if err != nil {
		return nil, err
	}
	opts.CDIDevices = append(opts.CDIDevices, info.CDIDevices...)
	return opts, nil
}

func (m *draContainerManager) PrepareDynamicResources(ctx context.Context, pod *v1.Pod) error {
	return m.dra.PrepareResources(ctx, pod)
}

func (m *draContainerManager) UnprepareDynamicResources(ctx context.Context, pod *v1.Pod) error {
	return m.dra.UnprepareResources(ctx, pod)
}

func (m *draContainerManager) PodMightNeedToUnprepareResources(uid types.UID) bool {
	return m.dra.PodMightNeedToUnprepareResources(uid)
}

func (m *draContainerManager) UpdateAllocatedResourcesStatus(logger klog.Logger, pod *v1.Pod, status *v1.PodStatus) {
	m.dra.UpdateAllocatedResourcesStatus(logger, pod, status)
}

func (m *draContainerManager) Updates() <-chan resourceupdates.Update {
	return m.dra.Updates()
}

// GetDynamicResources is what the kubelet's podresources API lists for a
// container: each claim the container uses, and per device its driver,
// pool, name, share and CDI devices, from the DRA manager's prepared
// state, as the kubelet's Linux container manager reports it. The stub
// reports none, so that monitoring agents reading the socket of a hollow
// node would see no DRA device.
func (m *draContainerManager) GetDynamicResources(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesapi.DynamicResource {
	infos, err := m.dra.GetContainerClaimInfos(pod, container)
	if err != nil {
		logger.Error(err, "Reading the container's claims for the podresources API", "pod", klog.KObj(pod), "container", container.Name)
		return nil
	}
	out := make([]*podresourcesapi.DynamicResource, 0, len(infos))
	for _, info := range infos {
		// Copies, made under the manager's lock.
		r := &podresourcesapi.DynamicResource{ClaimName: info.ClaimName, ClaimNamespace: info.Namespace}
		for _, driver := range slices.Sorted(maps.Keys(info.DriverState)) {
			for _, d := range info.DriverState[driver].Devices {
				cr := &podresourcesapi.ClaimResource{DriverName: driver, PoolName: d.PoolName, DeviceName: d.DeviceName}
				if d.ShareID != nil {
					cr.ShareId = ptr.To(string(*d.ShareID))
				}
				for _, id := range d.CDIDeviceIDs {
					cr.CdiDevices = append(cr.CdiDevices, &podresourcesapi.CDIDevice{Name: id})
				}
				r.ClaimResources = append(r.ClaimResources, cr)
			}
		}
		out = append(out, r)
	}
	return out
}
