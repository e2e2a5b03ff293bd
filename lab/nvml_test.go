package lab_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNVMLMockLab brings up lab/examples/nvml-mock.yaml: the GPU driver
// with its NVML inventory, go-nvml's mock servers standing in for the
// library, on hollow nodes. The slices are the mocks' GPUs; the claims and
// prioritized-fallback scenarios pass with them; and the driver passes
// both conformance layers for its manifest, drivers/nvml/driver.yaml.
func TestNVMLMockLab(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	l, restConfig, client := upLab(ctx, t, stateRoot(t), bin, exampleConfig(t, "nvml-mock.yaml", "t-nvml"))

	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	products := map[string][]string{}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			a := d.Attributes
			if a["uuid"].StringValue == nil || !strings.HasPrefix(*a["uuid"].StringValue, "GPU-") || a["resource.kubernetes.io/pcieRoot"].StringValue == nil {
				t.Errorf("%s/%s lacks a UUID or PCIe root: %v", s.Spec.Pool.Name, d.Name, a)
			}
			products[*s.Spec.NodeName] = append(products[*s.Spec.NodeName], *a["productName"].StringValue)
		}
	}
	for node, want := range map[string]string{
		"dgx-h100": strings.Repeat("NVIDIA H100 80GB HBM3,", 8),
		"dgx-a100": strings.Repeat("Mock NVIDIA A100-SXM4-40GB,", 8),
		"mixed":    strings.Repeat("NVIDIA H100 80GB HBM3,", 2) + strings.Repeat("NVIDIA A100-SXM4-80GB,", 2) + strings.Repeat("NVIDIA L4,", 4),
	} {
		if got := strings.Join(products[node], ",") + ","; got != want {
			t.Errorf("node %s publishes %s, want %s", node, got, want)
		}
	}

	runScenarios(ctx, t, restConfig, "claims", "prioritized-fallback")

	runConformance(ctx, t, l, client, "../drivers/nvml/driver.yaml")
}
