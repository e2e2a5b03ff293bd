package gpuapp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

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
	h := &gpuHealth{driver: d, devs: devs, gpus: map[string]gpu.GPUFault{}, ignored: o.IgnoredXIDs}
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
	go func() {
		if err := watcher.WatchXIDs(ctx, h.xid(ctx)); err != nil {
			klog.FromContext(ctx).Error(err, "Watching Xid events stopped; GPU failures go unnoticed until the driver restarts")
		}
	}()
	if inj, ok := nv.Lister.(nvml.XIDInjector); ok && o.FaultsFile != "" {
		go gpu.WatchFaults(ctx, o.FaultsFile, faultsPoll, h.inject(inj))
	}
	return nil
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
		x := gpu.LookupXID(ev.XID)
		logger.Info("GPU reported an Xid", "uuid", ev.UUID, "xid", ev.XID, "description", x.Description)
		name, ok := names[ev.UUID]
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
