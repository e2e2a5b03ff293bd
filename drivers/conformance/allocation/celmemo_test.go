package allocation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	drcel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

func TestReadsOfExpression(t *testing.T) {
	const d = "gpu.example.com"
	for _, tc := range []struct {
		expr string
		want *deviceReads // nil: evaluated on every device
	}{
		{`device.driver == "gpu.example.com"`, &deviceReads{driver: true}},
		{`device.attributes["gpu.example.com"].type == "gpu"`, &deviceReads{attributes: []qualified{{d, "type"}}}},
		{`device.attributes["gpu.example.com"]["type"] == "gpu"`, &deviceReads{attributes: []qualified{{d, "type"}}}},
		{`has(device.attributes["gpu.example.com"].numa)`, &deviceReads{attributes: []qualified{{d, "numa"}}}},
		{`"uuid" in device.attributes["gpu.example.com"]`, &deviceReads{attributes: []qualified{{d, ""}}}},
		{`device.attributes["gpu.example.com"].exists(k, k == "type")`, &deviceReads{attributes: []qualified{{d, ""}}}},
		{`device.capacity["gpu.example.com"].memory.compareTo(quantity("10Gi")) >= 0`, &deviceReads{capacity: []qualified{{d, "memory"}}}},
		{`device.allowMultipleAllocations && device.driver == "x"`, &deviceReads{driver: true, multi: true}},
		// The device read otherwise: every device evaluated.
		{`device.attributes.exists(domain, domain == "gpu.example.com")`, nil},
		{`device.attributes[device.driver].type == "gpu"`, nil},
		{`device.attributes.gpu.type == "gpu"`, nil},
		{`[device].exists(x, x.driver == "a")`, nil},
		{`[1].exists(device, device == 1) && device.driver == "a"`, nil},
		{`device.attributes[?"gpu.example.com"].hasValue()`, nil},
		{`device == null`, nil},
		{`device.driver ==`, nil}, // does not parse
	} {
		got := readsOfExpression(tc.expr)
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(deviceReads{}, qualified{})); diff != "" {
			t.Errorf("%s: reads (-want +got):\n%s", tc.expr, diff)
		}
	}
}

// TestSelectorMemoAgreesWithCEL evaluates selectors on many devices twice,
// once each and through the memo, and wants the same match and the same
// error every time; the memo must also evaluate the selectors that read
// named values fewer times than there are devices.
func TestSelectorMemoAgreesWithCEL(t *testing.T) {
	ctx := context.Background()
	exprs := []string{
		`device.driver == "gpu.example.com"`,
		`device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].type == "gpu"`,
		`device.attributes["gpu.example.com"].type == "gpu"`,
		`device.attributes["other.example.com"].type == "nic"`,
		`has(device.attributes["gpu.example.com"].numa) && device.attributes["gpu.example.com"].numa == 1`,
		`device.attributes["gpu.example.com"].numa > 0`, // fails where numa is missing or a string
		`"uuid" in device.attributes["gpu.example.com"]`,
		`device.attributes["gpu.example.com"].exists(k, k == "model")`,
		`device.capacity["gpu.example.com"].memory.compareTo(quantity("10Gi")) >= 0`,
		`device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))`,
		`device.allowMultipleAllocations`,
		`device.attributes[device.driver].type == "gpu"`,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(values ...string) string { return values[rng.IntN(len(values))] }
	var devs []struct {
		driver string
		dev    resourceapi.Device
	}
	for i := range 400 {
		dev := resourceapi.Device{Name: fmt.Sprintf("dev-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}}
		driver := pick("gpu.example.com", "other.example.com")
		// Each attribute with its domain, without (the driver's), or
		// absent; of one type or another.
		for _, name := range []string{"type", "numa", "model", "driverVersion"} {
			var attr resourceapi.DeviceAttribute
			switch pick("string", "int", "version", "none") {
			case "string":
				attr.StringValue = ptr.To(pick("gpu", "nic", "h100"))
			case "int":
				attr.IntValue = ptr.To(int64(rng.IntN(3)))
			case "version":
				attr.VersionValue = ptr.To(pick("1.0.0", "1.3.0"))
			default:
				continue
			}
			switch pick("gpu", "other", "bare") {
			case "gpu":
				dev.Attributes[resourceapi.QualifiedName("gpu.example.com/"+name)] = attr
			case "other":
				dev.Attributes[resourceapi.QualifiedName("other.example.com/"+name)] = attr
			default:
				dev.Attributes[resourceapi.QualifiedName(name)] = attr
			}
		}
		// A value no selector reads, different on every device.
		dev.Attributes["gpu.example.com/uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("GPU-%d", i))}
		if pick("memory", "none") == "memory" {
			dev.Capacity["gpu.example.com/memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse(pick("8Gi", "16Gi"))}
		}
		switch pick("unset", "true", "false") {
		case "true":
			dev.AllowMultipleAllocations = ptr.To(true)
		case "false":
			dev.AllowMultipleAllocations = ptr.To(false)
		}
		devs = append(devs, struct {
			driver string
			dev    resourceapi.Device
		}{driver, dev})
	}
	for _, expr := range exprs {
		compiled, err := devices.CompileSelectors(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		memo := newSelectorMemo(compiled)
		matched, failed := 0, 0
		for _, d := range devs {
			input := drcel.Device{Driver: d.driver, AllowMultipleAllocations: d.dev.AllowMultipleAllocations, Attributes: d.dev.Attributes, Capacity: d.dev.Capacity}
			want, _, wantErr := compiled[0].DeviceMatches(ctx, input)
			got, gotErr := memo.matches(ctx, compiled, 0, input, &d.dev)
			if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("%s on %s of %s %v: memo says %v, %v; CEL says %v, %v", expr, d.dev.Name, d.driver, d.dev.Attributes, got, gotErr, want, wantErr)
			}
			if want {
				matched++
			}
			if wantErr != nil {
				failed++
			}
		}
		evaluated := len(devs)
		if r := memo.reads[0]; r != nil {
			evaluated = len(memo.seen[0])
			// A whole domain holds the UUID: no two devices alike.
			whole := slices.ContainsFunc(r.attributes, func(q qualified) bool { return q.name == "" })
			if !whole && evaluated >= len(devs)/2 {
				t.Errorf("%s: evaluated on %d of %d devices; the values it reads have fewer combinations", expr, evaluated, len(devs))
			}
		}
		t.Logf("%s: %d devices match, %d fail; evaluated %d times", expr, matched, failed, evaluated)
	}
}
