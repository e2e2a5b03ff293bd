package devices

// Selectors and derived attributes are evaluated against published devices
// with the allocator's own CEL library, so that what dralab says about a
// device (its tier, whether a class has a free one) agrees with the
// scheduler by construction.

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// Input is what a CEL expression sees of device dev of driver: its driver,
// attributes, capacity and allowMultipleAllocations, as the allocator
// gives them.
func Input(driver string, dev *resourceapi.Device) cel.Device {
	return cel.Device{Driver: driver, AllowMultipleAllocations: dev.AllowMultipleAllocations, Attributes: dev.Attributes, Capacity: dev.Capacity}
}

// Selectors are compiled CEL selectors that must all match.
type Selectors []cel.CompilationResult

// cache keeps compiled expressions: compiling is what costs, and the same
// class and tier selectors are matched against every device of every
// report (the dashboard builds one per change). Selectors may read list
// attributes (DRAListTypeAttributes) and allowMultipleAllocations, as the
// allocator's environment lets them where the gates are on.
var cache = cel.NewCache(1024, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

// derived compiles derived attributes (and selectors over list-type
// attributes): with list-type attributes on, an attribute may be a list.
var derived = cel.NewCache(256, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

// CompileDerived compiles a derived attribute's expression, or takes it
// compiled from the cache, and returns its error.
func CompileDerived(expression string) error {
	if res := derived.GetOrCompileDerivedAttribute(expression); res.Error != nil {
		return res.Error
	}
	return nil
}

// Derive evaluates a derived attribute's expression for dev, as the
// allocator does for a request's derivedAttributes: its value, a scalar
// or a list.
func Derive(ctx context.Context, expression string, dev cel.Device) (*resourceapi.DeviceAttribute, error) {
	res := derived.GetOrCompileDerivedAttribute(expression)
	if res.Error != nil {
		return nil, res.Error
	}
	v, _, err := res.EvaluateDerivedAttribute(ctx, dev)
	return v, err
}

// CompileSelectors compiles selector expressions, or takes them compiled from the cache.
func CompileSelectors(expressions ...string) (Selectors, error) {
	out := make(Selectors, 0, len(expressions))
	for _, e := range expressions {
		res := cache.GetOrCompile(e)
		if res.Error != nil {
			return nil, res.Error
		}
		out = append(out, res)
	}
	return out, nil
}

// Match says whether every selector selects dev; an evaluation error is
// returned with a false match, as the allocator fails such a device.
func (s Selectors) Match(ctx context.Context, dev cel.Device) (bool, error) {
	for _, res := range s {
		ok, _, err := res.DeviceMatches(ctx, dev)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}
