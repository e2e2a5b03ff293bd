package allocation

import (
	"encoding/json"
	"fmt"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
)

// MetadataDevice is a device a container finds in its device metadata
// files (Kubernetes 1.37's device metadata: a driver's file of a claim
// request's devices, mounted at /var/run/kubernetes.io/dra-device-attributes).
type MetadataDevice struct {
	// Path is the file's path in the container; Request the claim's
	// request it is for.
	Path    string
	Request string
	Driver  string
	Pool    string
	Device  string
	// Attributes counts the device's attributes in the file; SameAsSlice
	// says they are the ones its ResourceSlice publishes.
	Attributes  int
	SameAsSlice bool
}

// Ref is the device as the allocation table names it: driver/pool/device.
func (m MetadataDevice) Ref() string { return m.Driver + "/" + m.Pool + "/" + m.Device }

// ParseMetadata reads the device metadata files a container printed, one
// per line as `<path in the container>=<the file's JSON stream on one
// line>` (a hollow node's container prints them so, with the first object
// only; a real one with `echo "$f=$(tr -d '\n' < $f)"`), the first object in
// metadata.resource.k8s.io/v1beta1, and compares each device's attributes
// with its ResourceSlice's. Other lines are ignored.
func (s *Snapshot) ParseMetadata(log string) ([]MetadataDevice, error) {
	var out []MetadataDevice
	for _, line := range strings.Split(log, "\n") {
		path, data, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || !strings.HasPrefix(path, metadata.ContainerDir+"/") {
			continue
		}
		var dm metadatav1beta1.DeviceMetadata
		// The first object of the stream: others follow on the line
		// where a container printed the whole file.
		if err := json.NewDecoder(strings.NewReader(data)).Decode(&dm); err != nil {
			return nil, fmt.Errorf("device metadata file %s: %w", path, err)
		}
		if gv := metadatav1beta1.SchemeGroupVersion.String(); dm.APIVersion != gv {
			return nil, fmt.Errorf("device metadata file %s: apiVersion %q, want %s first", path, dm.APIVersion, gv)
		}
		for _, req := range dm.Requests {
			for _, d := range req.Devices {
				m := MetadataDevice{Path: path, Request: req.Name, Driver: d.Driver, Pool: d.Pool, Device: d.Name, Attributes: len(d.Attributes)}
				if dev := s.device(d.Driver, d.Pool, d.Name); dev != nil {
					m.SameAsSlice = len(dev.Attributes) > 0 && apiequality.Semantic.DeepEqual(dev.Attributes, d.Attributes)
				}
				out = append(out, m)
			}
		}
	}
	return out, nil
}
