// Package gpu holds what every dralab GPU driver shares, whatever its
// inventory (fake profiles or NVML): the driver name, the CDI naming, the
// environment a prepared GPU sets, and the DeviceClasses, one for any GPU
// and one per tier.
package gpu

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/dralab/dralab/internal/devicecel"
)

const (
	// DriverName is the DRA driver name; it also qualifies the attributes.
	DriverName = "gpu.dralab.dev"
	// CDIKind is the CDI device kind of prepared GPUs.
	CDIKind = "dralab.dev/gpu"
	// EnvPrefix names the variables a prepared GPU sets: GPU_DEVICE_<n>,
	// GPU_DEVICE_<n>_PRODUCT and GPU_DEVICE_<n>_UUID for the claim's n-th GPU.
	EnvPrefix = "GPU_DEVICE"
	// ExtendedResource is what counting mode advertises through the
	// device-plugin API, the way GPU device plugins count.
	ExtendedResource = "dralab.dev/gpu"
	// ClassAny is the DeviceClass of any GPU of this driver.
	ClassAny = DriverName
	// NodeProfileLabel is the node label naming the node's GPU profile.
	NodeProfileLabel = "gpu.dralab.dev/profile"
	// NodeGPUsLabel is the node label with the node's number of fake GPUs.
	NodeGPUsLabel = "gpu.dralab.dev/gpus"
)

// Tier is a family of GPU models that a workload treats alike.
type Tier struct {
	// Name is the tier's name and its class's prefix: h100 → h100.gpu.dralab.dev.
	Name string
	// Model is the word the product name contains, e.g. "H100" in
	// "NVIDIA H100 80GB HBM3".
	Model string
}

// Tiers in order of preference: what a prioritized list tries first.
var Tiers = []Tier{{"h100", "H100"}, {"a100", "A100"}, {"l4", "L4"}}

// ClassName is the DeviceClass of a tier.
func (t Tier) ClassName() string { return t.Name + "." + DriverName }

// Selector is the tier's CEL expression: the model is a word of the
// product name (\b), so that "L4" does not match "NVIDIA L40S". The
// expression is guarded with has(): a device without a product name must
// not match, and must not make the expression fail, which would leave the
// pod unschedulable instead of falling back to the next subrequest. (Optional
// access, .?productName.orValue(""), reads better but its estimated cost
// exceeds the API's limit for selectors.)
func (t Tier) Selector() string {
	attr := fmt.Sprintf("device.attributes[%q].productName", DriverName)
	return fmt.Sprintf(`has(%s) && %s.matches("\\b%s\\b")`, attr, attr, t.Model)
}

// driverSelector matches this driver's devices.
var driverSelector = fmt.Sprintf("device.driver == %q", DriverName)

// DeviceClasses are the classes the driver's deployment creates.
func DeviceClasses() []resourceapi.DeviceClass {
	classes := []resourceapi.DeviceClass{newClass(ClassAny, driverSelector)}
	for _, t := range Tiers {
		classes = append(classes, newClass(t.ClassName(), driverSelector, t.Selector()))
	}
	return classes
}

func newClass(name string, expressions ...string) resourceapi.DeviceClass {
	c := resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "dralab"}},
	}
	for _, e := range expressions {
		c.Spec.Selectors = append(c.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return c
}

// TierOf returns the tier whose class selects the device, "" for none. It
// evaluates the classes' CEL selectors with the allocator's own CEL
// library, so it agrees with the scheduler by construction.
func TierOf(ctx context.Context, dev cel.Device) (string, error) {
	for _, t := range Tiers {
		sel, err := devicecel.Compile(driverSelector, t.Selector())
		if err != nil {
			return "", err
		}
		ok, err := sel.Match(ctx, dev)
		if err != nil {
			return "", err
		}
		if ok {
			return t.Name, nil
		}
	}
	return "", nil
}
