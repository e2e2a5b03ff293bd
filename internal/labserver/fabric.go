package labserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// fabricPublisher publishes the lab's enclosures of network-attached GPUs,
// as the driver's controller does in a cluster (`dralab-driver fabric
// controller`): once for every node that reaches them. A GPU whose
// attachment failed or never came is tainted in its pool (markFailed).
type fabricPublisher struct {
	client     kubernetes.Interface
	controller *resourceslice.Controller

	mu    sync.Mutex
	pools []fabric.Pool
}

// startFabric starts publishing the lab's enclosures; nil where it has
// none.
func startFabric(ctx context.Context, client kubernetes.Interface, cfg *config.Config) (*fabricPublisher, error) {
	if len(cfg.Fabric) == 0 {
		return nil, nil
	}
	pools, err := nodedrivers.FabricPools(cfg)
	if err != nil {
		return nil, err
	}
	c, err := fabric.Publish(klog.NewContext(ctx, klog.FromContext(ctx).WithName("fabric")), client, pools)
	if err != nil {
		return nil, fmt.Errorf("publishing the enclosures of network-attached GPUs: %w", err)
	}
	return &fabricPublisher{client: client, controller: c, pools: pools}, nil
}

// published waits for every pool to be published whole, which the lab's
// readiness needs: a node publishes none of these devices, so nothing else
// waits for them.
func (f *fabricPublisher) published(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	pools := slices.Clone(f.pools)
	f.mu.Unlock()
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := f.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, fabric.DriverName).String(),
		})
		if err != nil {
			return false, nil
		}
		missing = unpublishedPools(pools, list.Items)
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the enclosures %v of network-attached GPUs were not published: %w", missing, err)
	}
	return nil
}

// markFailed taints a GPU of a pool whose attachment failed or never
// came, and publishes the pool again.
func (f *fabricPublisher) markFailed(ctx context.Context, pool, device string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.pools {
		p := &f.pools[i]
		if p.Name != pool {
			continue
		}
		for j := range p.Count {
			if p.DeviceName(j) == device && !slices.Contains(p.Failed, j) {
				p.Failed = append(p.Failed, j)
			}
		}
	}
	res, err := fabric.Resources(f.pools)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Tainting a GPU that did not attach", "pool", pool, "device", device)
		return
	}
	f.controller.Update(res)
	klog.FromContext(ctx).Info("Tainted a GPU that did not attach", "pool", pool, "device", device, "taint", fabric.TaintAttachFailed)
}

// fabricDevice names GPU i of an enclosure.
func fabricDevice(pool string, i int) string { return fabric.Pool{Name: pool}.DeviceName(i) }

// unpublishedPools are the pools whose newest generation is not published
// whole in slices, with every device.
func unpublishedPools(pools []fabric.Pool, slices []resourceapi.ResourceSlice) []string {
	published := nodedrivers.IndexSlices(slices)
	var missing []string
	for _, p := range pools {
		if devices, complete := published.Pool(fabric.DriverName, p.Name); !complete || devices != p.Count {
			missing = append(missing, p.Name)
		}
	}
	return missing
}
