package kit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// DeviceFault is what a driver's health monitor says of a failed device.
type DeviceFault struct {
	// Message says what failed; the kubelet shows it in the status of the
	// pods that hold the device (allocatedResourcesStatus).
	Message string
	// Taint, if set, is put on the device in the node's ResourceSlice: the
	// scheduler keeps new claims off it (NoSchedule), and the eviction
	// controller also evicts the pods that hold it (NoExecute). Its
	// TimeAdded is set when the taint first appears.
	Taint *resourceapi.DeviceTaint
	// Unknown: the monitor cannot tell the device's health (it does not
	// watch it); the kubelet hears Unknown, not Unhealthy. A taint of
	// effect None says so in the ResourceSlice without keeping claims off.
	Unknown bool
}

// Health reporting: every HealthResend the driver sends the kubelet the
// health of every device, well within HealthCheckTimeout, after which the
// kubelet reports a device's health as Unknown.
const (
	HealthResend       = 10 * time.Second
	HealthCheckTimeout = 30 * time.Second
)

// deviceHealth is the driver's view of its devices' health.
type deviceHealth struct {
	mu sync.Mutex
	// faults are the failed devices; the others are healthy.
	faults map[string]DeviceFault
	// since is when each device's health last changed.
	since map[string]time.Time
	// changed is closed and replaced on every change.
	changed chan struct{}
}

// SetDeviceHealth replaces the driver's record of failed devices: the
// devices in faults have failed, every other device is healthy. Taints are
// published in the node's ResourceSlices, and the kubelet hears of the
// change at once. Devices the inventory does not have are an error, and
// nothing changes.
func (d *Driver) SetDeviceHealth(ctx context.Context, faults map[string]DeviceFault) error {
	faults = maps.Clone(faults)
	if faults == nil {
		faults = map[string]DeviceFault{}
	}
	for name := range faults {
		if _, ok := d.devices[name]; !ok {
			return fmt.Errorf("device health: %q is not a device of this node (%d devices)", name, len(d.devices))
		}
	}
	h := &d.health
	h.mu.Lock()
	now := time.Now()
	changed := false
	for _, name := range d.order {
		old, wasFaulty := h.faults[name]
		f, faulty := faults[name]
		if faulty != wasFaulty || f.Message != old.Message || f.Unknown != old.Unknown || !sameTaint(f.Taint, old.Taint) {
			changed = true
			h.since[name] = now
			if faulty && f.Taint != nil {
				t := *f.Taint
				t.TimeAdded = &metav1.Time{Time: now.Truncate(time.Second)}
				if wasFaulty && old.Taint != nil && old.Taint.Key == t.Key && old.Taint.Effect == t.Effect {
					t.TimeAdded = old.Taint.TimeAdded
				}
				f.Taint = &t
				faults[name] = f
			}
		} else if faulty {
			// Unchanged: keep the taint's time.
			faults[name] = old
		}
	}
	if !changed {
		h.mu.Unlock()
		return nil
	}
	h.faults = faults
	unknown := 0
	for _, f := range faults {
		if f.Unknown {
			unknown++
		}
	}
	d.opts.Metrics.setHealth(len(d.order)-len(faults), len(faults)-unknown, unknown)
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
	logger := klog.FromContext(ctx)
	logger.Info("Device health changed", "failed", slices.Sorted(maps.Keys(faults)))
	return d.republish(ctx)
}

func sameTaint(a, b *resourceapi.DeviceTaint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
}

// DeviceFaults returns the failed devices, as SetDeviceHealth last set them.
func (d *Driver) DeviceFaults() map[string]DeviceFault {
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	return maps.Clone(d.health.faults)
}

// apiDevices are the inventory's devices of the node's own pool as
// published: in order, with the taints of their faults. (A device of
// another pool is published, tainted or not, by whoever publishes that
// pool; the kubelet hears of its health from the plugin all the same.)
func (d *Driver) apiDevices() []resourceapi.Device {
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	out := make([]resourceapi.Device, 0, len(d.order))
	for _, name := range d.order {
		if d.devices[name].Pool != "" {
			continue
		}
		dev := d.devices[name].API
		if f, ok := d.health.faults[name]; ok && f.Taint != nil {
			dev.Taints = append(slices.Clip(dev.Taints), *f.Taint)
		}
		out = append(out, dev)
	}
	return out
}

// republish publishes the node's slices afresh, with the devices' taints.
func (d *Driver) republish(ctx context.Context) error {
	s, err := SlicesOf(d.apiDevices(), d.sets, d.opts.DevicesPerSlice)
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	d.slicesMu.Lock()
	d.slices = s
	d.slicesMu.Unlock()
	if d.helper == nil {
		return nil
	}
	if err := d.helper.PublishResources(ctx, d.resources()); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	return nil
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: the health of every
// device, at once, on every change and every HealthResend. A driver
// started without ReportHealth does not report health.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if !d.opts.ReportHealth {
		return kubeletplugin.ErrHealthNotSupported
	}
	logger := klog.FromContext(ctx)
	resend := time.NewTicker(HealthResend)
	defer resend.Stop()
	for {
		report, changed := d.healthReport()
		select {
		case reports <- report:
		case <-ctx.Done():
			return nil
		}
		logger.V(5).Info("Sent device health", "devices", len(report.Devices))
		select {
		case <-changed:
		case <-resend.C:
		case <-ctx.Done():
			return nil
		}
	}
}

// healthReport is every device's health, and the channel closed on the
// next change.
func (d *Driver) healthReport() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	h := &d.health
	h.mu.Lock()
	defer h.mu.Unlock()
	report := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(d.order))}
	for _, name := range d.order {
		dh := kubeletplugin.DeviceHealth{
			PoolName: d.poolOf(d.devices[name]), DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: h.since[name], HealthCheckTimeout: HealthCheckTimeout,
		}
		if f, ok := h.faults[name]; ok {
			dh.Health, dh.Message = kubeletplugin.HealthStatusUnhealthy, f.Message
			if f.Unknown {
				dh.Health = kubeletplugin.HealthStatusUnknown
			}
		}
		report.Devices = append(report.Devices, dh)
	}
	return report, h.changed
}
