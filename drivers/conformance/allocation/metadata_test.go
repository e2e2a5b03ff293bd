package allocation

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// A container's printed metadata files become the devices they name, each
// compared with its ResourceSlice's attributes; other lines are ignored; a
// file that does not decode, or whose first object is not v1beta1, is an
// error naming its path.
func TestParseMetadata(t *testing.T) {
	h100 := withTier(resourceapi.Device{Name: "gpu-0"}, "h100")
	s := snapshot([]resourceapi.Device{h100})
	path := "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/gpu.dralab.dev-metadata.json"
	file := func(attrs string) string {
		return path + `={"kind":"DeviceMetadata","apiVersion":"metadata.resource.k8s.io/v1beta1","requests":[{"name":"gpu","devices":[{"driver":"gpu.dralab.dev","pool":"n","name":"gpu-0","attributes":` + attrs + `}]}]}`
	}
	log := "GPU_DEVICE_0=gpu-0\nPATH=/bin\n" + file(`{"tier":{"string":"h100"}}`) + "\n"
	got, err := s.ParseMetadata(log)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Ref() != "gpu.dralab.dev/n/gpu-0" || got[0].Request != "gpu" || got[0].Path != path || got[0].Attributes != 1 || !got[0].SameAsSlice {
		t.Fatalf("ParseMetadata = %+v, want gpu-0 of request gpu with its slice's one attribute", got)
	}
	got, err = s.ParseMetadata(file(`{"tier":{"string":"a100"}}`))
	if err != nil || len(got) != 1 || got[0].SameAsSlice {
		t.Errorf("another tier than the slice's: %+v %v, want SameAsSlice false", got, err)
	}
	h100.Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To("GPU-1")}
	if got, _ := s.ParseMetadata(file(`{"tier":{"string":"h100"}}`)); len(got) != 1 || got[0].SameAsSlice {
		t.Errorf("an attribute left out: %+v, want SameAsSlice false", got)
	}
	for _, bad := range []string{path + "={", strings.Replace(file("{}"), "v1beta1", "v1alpha1", 1)} {
		if _, err := s.ParseMetadata(bad); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("ParseMetadata(%.60q…) = %v, want an error naming the file", bad, err)
		}
	}
}
