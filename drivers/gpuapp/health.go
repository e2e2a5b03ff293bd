package gpuapp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/nvml"
)

// watchHealth keeps the driver's device health: from the faults file for a
// fake inventory; from NVML's critical Xid events for an NVML inventory,
// into which a mock source's faults file injects its Xids.
func watchHealth(ctx context.Context, o Options, inv kit.Inventory, d kit.DeviceHealthSetter) error {
	devs, err := inv.Devices(ctx)
	if err != nil {
		return err
	}
	h := &gpuHealth{driver: d, devs: devs, gpus: map[string]gpu.GPUFault{}, ignored: o.IgnoredXIDs, unwatched: map[string]bool{}}
	nv, isNVML := inv.(*nvml.Inventory)
	if !isNVML {
		if o.FaultsFile != "" {
			go gpu.WatchFaults(ctx, o.FaultsFile, faultsPoll, func(ctx context.Context, gpus map[string]gpu.GPUFault) error {
				return h.set(ctx, gpus)
			})
		}
		return nil
	}
	watcher, ok := nv.Lister.(nvml.XIDWatcher)
	if !ok {
		return nil
	}
	go h.watch(ctx, watcher)
	if inj, ok := nv.Lister.(nvml.XIDInjector); ok && o.FaultsFile != "" {
		go gpu.WatchFaults(ctx, o.FaultsFile, faultsPoll, h.inject(inj))
	}
	return nil
}

// Watch retries: a watch that ends in an error is started again after
// watchBackoff, doubling to watchBackoffMax; from its watchUnknownAfter-th
// failure in a row its GPUs' health is unknown until a watch runs again.
var (
	watchBackoff      = time.Second
	watchBackoffMax   = 30 * time.Second
	watchUnknownAfter = 3
)

// watch runs the Xid watch until ctx ends, again after each error.
func (h *gpuHealth) watch(ctx context.Context, watcher nvml.XIDWatcher) {
	logger := klog.FromContext(ctx)
	emit := h.xid(ctx)
	backoff, failures := watchBackoff, 0
	for ctx.Err() == nil {
		started := time.Now()
		err := watcher.WatchXIDs(ctx, emit)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > watchBackoffMax {
			// It ran a while: a new failure, not the same one again.
			backoff, failures = watchBackoff, 0
		}
		failures++
		logger.Error(err, "Watching Xid events stopped; watching again", "failures", failures, "in", backoff)
		if failures == watchUnknownAfter {
			h.unwatchAll(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// unwatchAll says the health of every GPU unknown: none is watched.
func (h *gpuHealth) unwatchAll(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.devs {
		if d.API.Attributes[gpu.AttrUUID].StringValue != nil {
			h.unwatched[d.API.Name] = true
		}
	}
	if err := h.apply(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Saying the GPUs' health unknown")
	}
}

// gpuHealth is the failed GPUs of a node, by device name, from which the
// driver's device health follows (gpu.DeviceFaults: a GPU's MIG devices
// fail with it). On an NVML node a GPU that reported a critical Xid stays
// failed until the driver restarts (a real GPU needs a reset) or, on a
// mock, the lab heals it.
type gpuHealth struct {
	// driver is the DRA driver, or in counting mode the device plugin.
	driver kit.DeviceHealthSetter
	devs   []kit.Device
	mu     sync.Mutex
	gpus   map[string]gpu.GPUFault
	// injected are a mock's GPUs the faults file failed.
	injected map[string]gpu.GPUFault
	// ignored are the node's own application-error Xids (--ignored-xids).
	ignored []int
	// unwatched are the GPUs whose Xids the watch does not see: their
	// health is unknown, unless they failed.
	unwatched map[string]bool
}

// set replaces the failed GPUs.
func (h *gpuHealth) set(ctx context.Context, gpus map[string]gpu.GPUFault) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gpus = maps.Clone(gpus)
	return h.apply(ctx)
}

// apply sets the driver's device health from the failed GPUs, leaving out
// those whose Xid the node ignores (from the faults file as from NVML).
func (h *gpuHealth) apply(ctx context.Context) error {
	gpus := maps.Clone(h.gpus)
	maps.DeleteFunc(gpus, func(_ string, f gpu.GPUFault) bool { return slices.Contains(h.ignored, f.XID) })
	for name := range h.unwatched {
		if _, failed := gpus[name]; !failed {
			gpus[name] = gpu.GPUFault{Unwatched: true}
		}
	}
	faults, err := gpu.DeviceFaults(h.devs, gpus)
	if err != nil {
		return err
	}
	return h.driver.SetDeviceHealth(ctx, faults)
}

// xid records an Xid event of a GPU, by its UUID.
func (h *gpuHealth) xid(ctx context.Context) func(nvml.XIDEvent) {
	logger := klog.FromContext(ctx)
	names := map[string]string{}
	for _, d := range h.devs {
		if u := d.API.Attributes[gpu.AttrUUID].StringValue; u != nil {
			names[*u] = d.API.Name
		}
	}
	return func(ev nvml.XIDEvent) {
		name, ok := names[ev.UUID]
		if ev.Watched || ev.Unwatched {
			if !ok {
				return
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.unwatched[name] == ev.Unwatched {
				return
			}
			if ev.Unwatched {
				h.unwatched[name] = true
				logger.Info("A GPU's Xids are not watched: its health is unknown", "gpu", name)
			} else {
				delete(h.unwatched, name)
			}
			if err := h.apply(ctx); err != nil {
				logger.Error(err, "Recording which GPUs are watched")
			}
			return
		}
		x := gpu.LookupXID(ev.XID)
		logger.Info("GPU reported an Xid", "uuid", ev.UUID, "xid", ev.XID, "description", x.Description)
		if !ok {
			logger.Info("An Xid of a GPU this driver does not publish", "uuid", ev.UUID)
			return
		}
		if _, fault := x.Fault(); !fault || slices.Contains(h.ignored, ev.XID) {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if f, failed := h.gpus[name]; failed && !f.Unattributed && ev.Unattributed {
			return // known failed: suspicion adds nothing
		}
		h.gpus[name] = gpu.GPUFault{XID: ev.XID, Unattributed: ev.Unattributed}
		if err := h.apply(ctx); err != nil {
			logger.Error(err, "Recording a GPU's Xid")
		}
	}
}

// inject turns the faults file of a mock source into Xid events of its
// event set; a GPU the file no longer names is reset: healthy again.
func (h *gpuHealth) inject(inj nvml.XIDInjector) func(context.Context, map[string]gpu.GPUFault) error {
	uuids := map[string]string{}
	for _, d := range h.devs {
		if u := d.API.Attributes[gpu.AttrUUID].StringValue; u != nil {
			uuids[d.API.Name] = *u
		}
	}
	return func(ctx context.Context, gpus map[string]gpu.GPUFault) error {
		for name, f := range gpus {
			if _, ok := uuids[name]; !ok {
				return fmt.Errorf("GPU fault of %q: no such GPU on this node", name)
			}
			if h.injected[name] != f {
				if err := inj.InjectXID(uuids[name], f.XID); err != nil {
					return err
				}
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		reset := false
		for name := range h.injected {
			if _, still := gpus[name]; !still {
				if err := inj.ResetGPU(uuids[name]); err != nil {
					return err
				}
				delete(h.gpus, name)
				reset = true
			}
		}
		h.injected = maps.Clone(gpus)
		if !reset {
			return nil
		}
		return h.apply(ctx)
	}
}
