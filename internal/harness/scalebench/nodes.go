package scalebench

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
)

// tierProfiles are the GPU profiles of the virtual nodes, in turn: a
// mixed fleet, a third of each tier.
var tierProfiles = []string{"h100-80gb", "a100-80gb", "l4-24gb"}

// virtualLabel marks the bench's virtual nodes.
const virtualLabel = "bench.dralab.dev/virtual"

// leaseRenewal is how often the bench renews each virtual node's lease, as
// a kubelet would: the controller manager's node lifecycle controller
// marks a node unreachable (and taints it) after 50 s without a renewal.
// Kubelets renew every 10 s; the bench renews every 20 s, half their
// load, still well inside the grace period.
const leaseRenewal = 20 * time.Second

func nodeName(i int) string { return fmt.Sprintf("vnode-%04d", i) }

// virtualNode is a Node as a kubelet would register it, Ready, with room
// for pods; counting nodes advertise their GPUs as capacity.
func virtualNode(i, devices int, counting bool) *v1.Node {
	name := nodeName(i)
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	if counting {
		capacity[extendedResource] = *resource.NewQuantity(int64(devices), resource.DecimalSI)
	}
	now := metav1.Now()
	labels := map[string]string{
		v1.LabelHostname: name,
		v1.LabelOSStable: "linux",
		virtualLabel:     "true",
	}
	// Every node sits in its NVLink domain and rack, as a lab node with a
	// topology does: the gang-topology case's groups are kept to one.
	maps.Copy(labels, domainOf(i).Labels())
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: v1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       v1.NodeRunning,
			Conditions: []v1.NodeCondition{{
				Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
				Message: "virtual node of the scale bench", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			NodeInfo: v1.NodeSystemInfo{KubeletVersion: build.KubernetesVersion, OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// virtualSlice is the ResourceSlice the GPU driver would publish on the
// node: fake GPUs of the node's tier, with the driver's attributes.
func virtualSlice(ctx context.Context, i, devices int) (*resourceapi.ResourceSlice, error) {
	name := nodeName(i)
	profile, err := fakegpu.LookupProfile(tierProfiles[i%len(tierProfiles)])
	if err != nil {
		return nil, err
	}
	inv := &fakegpu.Inventory{Node: name, Profile: profile, Count: devices}
	gpus, err := inv.Devices(ctx)
	if err != nil {
		return nil, err
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + gpu.DriverName},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   gpu.DriverName,
			NodeName: ptr.To(name),
			Pool:     resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
		},
	}
	for _, d := range gpus {
		slice.Spec.Devices = append(slice.Spec.Devices, d.API)
	}
	return slice, nil
}

func lease(name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
}

// createNodes registers n virtual nodes of devices GPUs: each a Node, its Lease, and for
// DRA its ResourceSlice, created by workers in parallel.
func createNodes(ctx context.Context, client kubernetes.Interface, n, devices int, counting bool, workers int) error {
	return parallel(ctx, n, workers, func(ctx context.Context, i int) error {
		node := virtualNode(i, devices, counting)
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		if _, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(ctx, lease(node.Name), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the lease of node %s: %w", node.Name, err)
		}
		if counting {
			return nil
		}
		slice, err := virtualSlice(ctx, i, devices)
		if err != nil {
			return err
		}
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceSlice %s: %w", slice.Name, err)
		}
		return nil
	})
}

// renewLeases keeps the virtual nodes' leases fresh until ctx ends: every
// leaseRenewal, a patch of each lease's renewTime, in parallel, so that a
// busy API server delays a round rather than starving the last nodes.
func renewLeases(ctx context.Context, client kubernetes.Interface, n, workers int) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(leaseRenewal)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		patch := fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, metav1.NewMicroTime(time.Now()).Format(metav1.RFC3339Micro))
		err := parallel(ctx, n, workers, func(ctx context.Context, i int) error {
			_, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Patch(ctx, nodeName(i), types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "Renewing the virtual nodes' leases")
		}
	}
}

// parallel runs f for 0…n-1 on workers goroutines and returns the first
// error, after which the others stop taking work.
func parallel(ctx context.Context, n, workers int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		// The caller's context ended, not ours.
		first = context.Cause(ctx)
	}
	return first
}
