package gpu_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
)

// matches evaluates a class's selectors against a device the way the
// scheduler's allocator does.
func matches(t *testing.T, class resourceapi.DeviceClass, dev cel.Device) bool {
	t.Helper()
	for _, s := range class.Spec.Selectors {
		res := cel.GetCompiler(cel.Features{}).CompileCELExpression(s.CEL.Expression, cel.Options{})
		if res.Error != nil {
			t.Fatalf("class %s: %v", class.Name, res.Error)
		}
		// The API server rejects selectors whose worst-case cost exceeds this.
		if res.MaxCost > resourceapi.CELSelectorExpressionMaxCost {
			t.Fatalf("class %s: selector %q costs up to %d, over the API's limit %d", class.Name, s.CEL.Expression, res.MaxCost, resourceapi.CELSelectorExpressionMaxCost)
		}
		ok, _, err := res.DeviceMatches(context.Background(), dev)
		if err != nil {
			t.Fatalf("class %s on %v: %v", class.Name, dev.Attributes, err)
		}
		if !ok {
			return false
		}
	}
	return true
}

// product is a whole GPU of a driver with a product name.
func product(driver, name string) cel.Device {
	d := cel.Device{Driver: driver, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		gpu.AttrType: {StringValue: ptr.To(gpu.TypeGPU)},
	}}
	if name != "" {
		d.Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To(name)}
	}
	return d
}

func TestTierClassesSelectTheirProfiles(t *testing.T) {
	classes := map[string]resourceapi.DeviceClass{}
	for _, c := range gpu.DeviceClasses() {
		classes[c.Name] = c
	}
	if len(classes) != 6 {
		t.Fatalf("classes: %v", classes)
	}
	profiles, err := fakegpu.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range profiles {
		dev := product(gpu.DriverName, p.ProductName)
		if !matches(t, classes[gpu.ClassAny], dev) {
			t.Errorf("class %s does not match %s", gpu.ClassAny, p.Name)
		}
		if got, err := gpu.TierOf(context.Background(), dev); err != nil || got != p.Tier {
			t.Errorf("TierOf(%s) = %q, %v; want %q", p.Name, got, err, p.Tier)
		}
		for _, tier := range gpu.Tiers {
			got, want := matches(t, classes[tier.ClassName()], dev), tier.Name == p.Tier
			if got != want {
				t.Errorf("class %s matches %s (%s): %v, want %v", tier.ClassName(), p.Name, p.ProductName, got, want)
			}
		}
	}
	// Real product names: NVML's, including look-alikes.
	for name, tier := range map[string]string{
		"NVIDIA H100 NVL": "h100", "NVIDIA H100 PCIe": "h100", "NVIDIA A100-PCIE-40GB": "a100",
		"NVIDIA L40S": "", "NVIDIA H200": "", "NVIDIA A10": "", "Tesla T4": "", "NVIDIA B200": "", "NVIDIA GB200": "",
	} {
		for _, t2 := range gpu.Tiers {
			if got := matches(t, classes[t2.ClassName()], product(gpu.DriverName, name)); got != (t2.Name == tier) {
				t.Errorf("class %s on %q = %v", t2.ClassName(), name, got)
			}
		}
	}
	// Another driver's device, or one without a product name, matches no
	// tier and makes no selector fail.
	for _, dev := range []cel.Device{product("other.example.com", "NVIDIA H100 80GB HBM3"), product(gpu.DriverName, "")} {
		for _, tier := range gpu.Tiers {
			if matches(t, classes[tier.ClassName()], dev) {
				t.Errorf("class %s matches %+v", tier.ClassName(), dev)
			}
		}
	}
}

func TestConfigure(t *testing.T) {
	env, err := gpu.Configure([]byte(`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeSlicing": {"interval": "Short"}}`))
	if err != nil || env["TIMESLICE"] != "Short" || len(env) != 1 {
		t.Fatalf("Configure = %v, %v", env, err)
	}
	for in, want := range map[string]string{
		`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeSlicing": {"interval": "Forever"}}`: `timeSlicing.interval "Forever": want one of Default, Short`,
		`{"apiVersion": "gpu.dralab.dev/v1alpha1", "kind": "GPUConfig", "timeSlice": {}}`:                        `unknown field "timeSlice"`,
		`{"apiVersion": "gpu.example.com/v1", "kind": "GPUConfig"}`:                                              `want gpu.dralab.dev/v1alpha1, GPUConfig`,
		`[1]`: "GPUConfig",
	} {
		if _, err := gpu.Configure([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Configure(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

// On a partitioned node the MIG class selects the MIG devices and only
// them; the tier classes and the class of any GPU select the whole GPUs,
// and a device without a type matches no class and fails no selector.
func TestMIGClassSelectsMIGDevicesOnly(t *testing.T) {
	classes := map[string]resourceapi.DeviceClass{}
	for _, c := range gpu.DeviceClasses() {
		classes[c.Name] = c
	}
	p, err := fakegpu.LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := (&fakegpu.Inventory{Node: "n", Profile: p, Count: 2, Partitioning: fakegpu.PartitioningMIG, TimeSlices: 2}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	migs, shares := 0, 0
	for _, d := range devs {
		dev := cel.Device{Driver: gpu.DriverName, Attributes: d.API.Attributes, Capacity: d.API.Capacity}
		typ := *d.API.Attributes[gpu.AttrType].StringValue
		isMIG, isShare := typ == gpu.TypeMIG, typ == gpu.TypeTimeSlice
		if isMIG {
			migs++
		}
		if isShare {
			shares++
		}
		for name, class := range classes {
			var want bool
			switch {
			case isMIG:
				want = name == gpu.ClassMIG
			case isShare:
				want = name == gpu.ClassTimeSlice
			default:
				want = name == gpu.ClassAny || name == "h100."+gpu.DriverName
			}
			if got := matches(t, class, dev); got != want {
				t.Errorf("class %s on %s: %v, want %v", name, d.API.Name, got, want)
			}
		}
		if tier, err := gpu.TierOf(context.Background(), dev); err != nil || (tier == "h100") == (isMIG || isShare) {
			t.Errorf("TierOf(%s) = %q, %v", d.API.Name, tier, err)
		}
	}
	if migs != 2*18 || shares != 2*2 {
		t.Errorf("%d MIG devices and %d shares, want 18 and 2 per H100", migs, shares)
	}
	untyped := cel.Device{Driver: gpu.DriverName, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
	}}
	for name, class := range classes {
		if matches(t, class, untyped) {
			t.Errorf("class %s matches a device without a type", name)
		}
	}
}
