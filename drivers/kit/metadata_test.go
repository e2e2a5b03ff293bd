package kit

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// With DeviceMetadata a prepared claim's CDI devices mount a file, under
// the metadata directory, that names the claim's devices with the
// attributes they publish; unprepare removes it. Without, no such mount.
func TestDeviceMetadata(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := newHarness(t, 2, func(o *Options) {
			o.DeviceMetadata = on
			inv := testDevices(2)
			for i := range inv {
				inv[i].API.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(int64(i))}}
			}
			o.Inventory = inv
		})
		c := h.claim("one", "gpu-1")
		res := h.prepare(c)[string(c.UID)]
		if res.Error != "" {
			t.Fatalf("prepare: %s", res.Error)
		}
		cache, err := cdi.NewCache(cdi.WithSpecDirs(h.opts.CDIDir), cdi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		spec := &oci.Spec{Process: &oci.Process{}}
		if _, err := cache.InjectDevices(spec, cdiIDs(res)...); err != nil {
			t.Fatalf("CDI devices %v: %v", cdiIDs(res), err)
		}
		var mounts []oci.Mount
		for _, m := range spec.Mounts {
			if strings.HasPrefix(m.Destination, metadata.ContainerDir+"/") {
				mounts = append(mounts, m)
			}
		}
		if !on {
			if len(mounts) > 0 {
				t.Errorf("without DeviceMetadata the container mounts %v", mounts)
			}
			continue
		}
		if len(mounts) != 1 || !strings.HasSuffix(mounts[0].Destination, "/one/gpu/"+testDriver+metadata.MetadataFileSuffix) {
			t.Fatalf("metadata mounts %v, want one for claim one, request gpu", mounts)
		}
		data, err := os.ReadFile(mounts[0].Source)
		if err != nil {
			t.Fatal(err)
		}
		var dm metadatav1beta1.DeviceMetadata
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&dm); err != nil {
			t.Fatal(err)
		}
		if len(dm.Requests) != 1 || len(dm.Requests[0].Devices) != 1 {
			t.Fatalf("metadata %+v, want one request with one device", dm)
		}
		d := dm.Requests[0].Devices[0]
		if d.Driver != testDriver || d.Pool != testNode || d.Name != "gpu-1" || d.Attributes["index"].IntValue == nil || *d.Attributes["index"].IntValue != 1 {
			t.Errorf("metadata device %+v, want gpu-1 with index 1", d)
		}
		if got := h.unprepare(c)[string(c.UID)]; got.Error != "" {
			t.Fatalf("unprepare: %s", got.Error)
		}
		if _, err := os.Stat(mounts[0].Source); !os.IsNotExist(err) {
			t.Errorf("metadata file after unprepare: %v", err)
		}
		if files := h.specFiles(); len(files) != 0 {
			t.Errorf("CDI specs left after unprepare: %v", files)
		}
	}
}
