package driverapp

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/nvml"
)

// watchHealth keeps the driver's device health: from the faults file for a
// fake inventory; from NVML's critical Xid events for an NVML inventory,
// into which a mock source's faults file injects its Xids.
func watchHealth(ctx context.Context, o Options, inv kit.Inventory, d *kit.Driver) error {
	devs, err := inv.Devices(ctx)
	if err != nil {
		return err
	}
	nv, isNVML := inv.(*nvml.Inventory)
	if !isNVML {
		if o.FaultsFile != "" {
			go gpu.WatchFaults(ctx, o.FaultsFile, faultsPoll, func(ctx context.Context, gpus map[string]gpu.GPUFault) error {
				faults, err := gpu.DeviceFaults(devs, gpus)
				if err != nil {
					return err
				}
				return d.SetDeviceHealth(ctx, faults)
			})
		}
		return nil
	}
	watcher, ok := nv.Lister.(nvml.XIDWatcher)
	if !ok {
		return nil
	}
	byUUID, err := nv.DeviceNamesByUUID(ctx)
	if err != nil {
		return err
	}
	h := &xidHealth{driver: d, byUUID: byUUID, faults: map[string]kit.DeviceFault{}}
	go func() {
		if err := watcher.WatchXIDs(ctx, h.xid(ctx)); err != nil {
			klog.FromContext(ctx).Error(err, "Watching Xid events stopped; GPU failures go unnoticed until the driver restarts")
		}
	}()
	if inj, ok := nv.Lister.(nvml.XIDInjector); ok && o.FaultsFile != "" {
		go gpu.WatchFaults(ctx, o.FaultsFile, faultsPoll, h.inject(devs, inj))
	}
	return nil
}

// xidHealth is the health of an NVML node's devices: a GPU that reported a
// critical Xid is failed, with its MIG devices, until the driver restarts
// (a real GPU needs a reset) or, on a mock, the lab heals it.
type xidHealth struct {
	driver *kit.Driver
	byUUID map[string][]string
	mu     sync.Mutex
	faults map[string]kit.DeviceFault
	// injected are a mock's GPUs the faults file failed, by device name.
	injected map[string]gpu.GPUFault
}

func (h *xidHealth) xid(ctx context.Context) func(nvml.XIDEvent) {
	logger := klog.FromContext(ctx)
	return func(ev nvml.XIDEvent) {
		x := gpu.LookupXID(ev.XID)
		logger.Info("GPU reported an Xid", "uuid", ev.UUID, "xid", ev.XID, "description", x.Description)
		fault, ok := x.Fault()
		if !ok {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, name := range h.byUUID[ev.UUID] {
			h.faults[name] = fault
		}
		if err := h.driver.SetDeviceHealth(ctx, maps.Clone(h.faults)); err != nil {
			logger.Error(err, "Recording a GPU's Xid")
		}
	}
}

// inject turns the faults file of a mock source into Xid events of its
// event set; a GPU the file no longer names is reset: healthy again.
func (h *xidHealth) inject(devs []kit.Device, inj nvml.XIDInjector) func(context.Context, map[string]gpu.GPUFault) error {
	uuids := map[string]string{}
	for _, d := range devs {
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
				for _, dev := range h.byUUID[uuids[name]] {
					delete(h.faults, dev)
				}
				reset = true
			}
		}
		h.injected = maps.Clone(gpus)
		if !reset {
			return nil
		}
		return h.driver.SetDeviceHealth(ctx, maps.Clone(h.faults))
	}
}
