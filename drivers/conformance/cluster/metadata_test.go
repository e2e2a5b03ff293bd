package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/utils/ptr"
)

// The device-metadata check passes only when the container finds its
// claim's file naming the claim and exactly the allocated device with its
// slice's attributes: a file naming another device, another claim, other
// attributes or two devices fails it, and so does a container that finds
// no file.
func TestDeviceMetadataMustNameTheAllocatedDevice(t *testing.T) {
	type mutation func(dm *metadatav1beta1.DeviceMetadata)
	for _, c := range []struct {
		name   string
		mutate mutation
		none   bool
		want   string
	}{
		{"agrees", nil, false, ""},
		{"no file", nil, true, "shows no " + metadata.ResourceClaimFilePath(fakeDriver, "meta", "dev")},
		{"another device", func(dm *metadatav1beta1.DeviceMetadata) { dm.Requests[0].Devices[0].Name = "gpu-9" }, false, "claim meta was allocated node-a/gpu-"},
		{"another claim", func(dm *metadatav1beta1.DeviceMetadata) { dm.Name = "other" }, false, "names claim"},
		{"other attributes", func(dm *metadatav1beta1.DeviceMetadata) {
			dm.Requests[0].Devices[0].Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To("GPU-9999")}
		}, false, "its ResourceSlice node-a-gpus publishes"},
		{"two devices", func(dm *metadatav1beta1.DeviceMetadata) {
			dm.Requests[0].Devices = append(dm.Requests[0].Devices, dm.Requests[0].Devices[0])
		}, false, "names ["},
		{"an older version first", func(dm *metadatav1beta1.DeviceMetadata) { dm.APIVersion = "metadata.resource.k8s.io/v1alpha1" }, false, "want DeviceMetadata of metadata.resource.k8s.io/v1beta1 first"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(2, true))
			k.m.Timeouts.PodRunning = 2 * time.Second
			f.setLog(func(int) string {
				if c.none {
					return "PATH=/bin\n"
				}
				// The tracker, not the client: the fake serves logs under
				// its lock, which the client's reactors take too.
				obj, err := f.client.Tracker().Get(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), k.ns, "meta")
				if err != nil {
					return ""
				}
				claim := obj.(*resourceapi.ResourceClaim)
				if claim.Status.Allocation == nil {
					return ""
				}
				r := claim.Status.Allocation.Devices.Results[0]
				var attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
				for _, d := range fakeDevices(2, true) {
					if d.Name == r.Device {
						attrs = d.Attributes
					}
				}
				dm := metadatav1beta1.DeviceMetadata{
					TypeMeta:   metav1.TypeMeta{APIVersion: metadatav1beta1.SchemeGroupVersion.String(), Kind: "DeviceMetadata"},
					ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace, UID: claim.UID, Generation: 1},
					Requests:   []metadatav1beta1.DeviceMetadataRequest{{Name: "dev", Devices: []metadatav1beta1.Device{{Driver: r.Driver, Pool: r.Pool, Name: r.Device, Attributes: attrs}}}},
				}
				if c.mutate != nil {
					c.mutate(&dm)
				}
				data, _ := json.Marshal(dm)
				return fmt.Sprintf("PATH=/bin\n%s=%s{\"apiVersion\":\"metadata.resource.k8s.io/v1alpha1\"}\n", metadata.ResourceClaimFilePath(fakeDriver, "meta", "dev"), data)
			})
			err := k.deviceMetadata(context.Background(), t.Logf, k)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("got %v, want a pass", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
