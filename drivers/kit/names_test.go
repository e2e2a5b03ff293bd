package kit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// A name of the driver's own domain is published unqualified; qualified,
// the driver does not start (Kubernetes 1.38's helper would refuse the
// pool), and the error names the device, the name and the form to use.
// Names of other domains, the standard ones among them, are fine.
func TestCheckNamesRefusesTheOwnDomain(t *testing.T) {
	dev := func(attr, capacity string) resourceapi.Device {
		d := resourceapi.Device{Name: "gpu-0",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model":                           {StringValue: ptr.To("H100")},
				"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:15")},
				"nic.other.dev/rail":              {IntValue: ptr.To[int64](0)},
				resourceapi.QualifiedName(attr):   {IntValue: ptr.To[int64](1)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				resourceapi.QualifiedName(capacity): {Value: resource.MustParse("80Gi")},
			},
		}
		return d
	}
	if err := CheckNames(testDriver, []resourceapi.Device{dev("numa", "memory")}); err != nil {
		t.Errorf("unqualified own names and other domains' names: %v", err)
	}
	for _, c := range []struct{ attr, capacity, want string }{
		{testDriver + "/numa", "memory", `device gpu-0: attribute name "gpu.test.dev/numa" is qualified with the driver's own domain gpu.test.dev: publish it as "numa"`},
		{"numa", testDriver + "/memory", `device gpu-0: capacity name "gpu.test.dev/memory" is qualified with the driver's own domain gpu.test.dev: publish it as "memory"`},
	} {
		err := CheckNames(testDriver, []resourceapi.Device{dev(c.attr, c.capacity)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckNames(%s, %s) = %v, want %q", c.attr, c.capacity, err, c.want)
		}
	}

	// A driver whose inventory has one does not start and publishes nothing.
	dir := t.TempDir()
	client := fake.NewClientset()
	_, err := Start(context.Background(), Options{
		DriverName: testDriver, NodeName: testNode, KubeClient: client,
		RegistrarDir: filepath.Join(dir, "registry"), PluginDir: filepath.Join(dir, "plugin"),
		CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: filepath.Join(dir, "checkpoint.json"), CDIKind: "test.dev/gpu",
		Inventory: staticInventory{{API: dev(testDriver+"/numa", "memory")}},
	})
	if err == nil || !strings.Contains(err.Error(), `publish it as "numa"`) {
		t.Errorf("Start with an own-domain attribute = %v, want refused", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "cdi")); serr == nil {
		t.Error("the refused driver created its CDI directory")
	}
	if list, _ := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{}); len(list.Items) > 0 {
		t.Errorf("the refused driver published %d slices", len(list.Items))
	}
}
