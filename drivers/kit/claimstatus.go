package kit

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/klog/v2"
)

// Claim device status: what the driver prepared, in the claim's
// status.devices, one entry per prepared device (and share), written with
// server-side apply under the driver's name as field manager, so that it
// merges with what others (an attach controller, another driver) write
// there and leaves their entries alone.
const (
	// ConditionReady is the condition of a prepared device.
	ConditionReady   = "Ready"
	reasonPrepared   = "Prepared"
	claimStatusWrite = 10 * time.Second
)

// deviceStatusData is a prepared device's status data: its inventory's
// StatusData with what its preparation added.
func (d *Driver) deviceStatusData(pd PreparedDevice) map[string]string {
	data := maps.Clone(d.devices[pd.Device].StatusData)
	if len(pd.StatusData) > 0 {
		if data == nil {
			data = map[string]string{}
		}
		maps.Copy(data, pd.StatusData)
	}
	return data
}

// writeClaimStatus applies the status.devices entries of a prepared claim:
// Ready, with the devices' data. A failure is logged, not returned: the
// container gets its devices whatever the claim's status says.
func (d *Driver) writeClaimStatus(ctx context.Context, namespace, name string, c *PreparedClaim) {
	status := resourceapply.ResourceClaimStatus()
	now := metav1.Now()
	for _, pd := range c.Devices {
		entry := resourceapply.AllocatedDeviceStatus().
			WithDriver(d.opts.DriverName).WithPool(pd.Pool).WithDevice(pd.Device).
			WithConditions(metav1apply.Condition().
				WithType(ConditionReady).WithStatus(metav1.ConditionTrue).WithReason(reasonPrepared).
				WithMessage(fmt.Sprintf("prepared on node %s", d.opts.NodeName)).WithLastTransitionTime(now))
		if pd.ShareID != "" {
			entry.WithShareID(pd.ShareID)
		}
		if nd := d.devices[pd.Device].NetworkData; nd != nil {
			entry.WithNetworkData(resourceapply.NetworkDeviceData().
				WithInterfaceName(nd.InterfaceName).WithIPs(nd.IPs...).WithHardwareAddress(nd.HardwareAddress))
		}
		if data := d.deviceStatusData(pd); len(data) > 0 {
			raw, err := json.Marshal(data)
			if err == nil {
				entry.WithData(runtime.RawExtension{Raw: raw})
			}
		}
		status.WithDevices(entry)
	}
	d.applyClaimStatus(ctx, namespace, name, status)
}

// clearClaimStatus removes the driver's status.devices entries of an
// unprepared claim: an apply without them drops what the field manager
// owned. A claim that is gone needs nothing.
func (d *Driver) clearClaimStatus(ctx context.Context, namespace, name string) {
	d.applyClaimStatus(ctx, namespace, name, resourceapply.ResourceClaimStatus())
}

func (d *Driver) applyClaimStatus(ctx context.Context, namespace, name string, status *resourceapply.ResourceClaimStatusApplyConfiguration) {
	if d.opts.KubeClient == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, claimStatusWrite)
	defer cancel()
	claim := resourceapply.ResourceClaim(name, namespace).WithStatus(status)
	_, err := d.opts.KubeClient.ResourceV1().ResourceClaims(namespace).ApplyStatus(ctx, claim, metav1.ApplyOptions{FieldManager: d.opts.DriverName, Force: true})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Writing the claim's device status", "claim", klog.KRef(namespace, name))
	}
}
