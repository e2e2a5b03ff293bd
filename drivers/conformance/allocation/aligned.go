package allocation

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// Aligned says, for a device a claim was allocated, each matchAttribute
// constraint of the claim that ties it to other devices of the claim: the
// attribute, the value it has for the device (a derived attribute's
// computed as the scheduler computes it, from the request's expression)
// and the devices it is aligned with, e.g. "resource.kubernetes.io/pcieRoot
// pci0000:15, with nic-0".
func (s *Snapshot) Aligned(ctx context.Context, claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) []string {
	var out []string
	for _, c := range claim.Spec.Devices.Constraints {
		if c.MatchAttribute == nil {
			continue
		}
		in := func(request string) bool {
			parent, _, _ := strings.Cut(request, "/")
			return len(c.Requests) == 0 || slices.Contains(c.Requests, parent) || slices.Contains(c.Requests, request)
		}
		if !in(r.Request) {
			continue
		}
		var with []string
		for _, o := range claim.Status.Allocation.Devices.Results {
			if in(o.Request) && (o.Driver != r.Driver || o.Pool != r.Pool || o.Device != r.Device || o.Request != r.Request) {
				with = append(with, o.Device)
			}
		}
		if len(with) == 0 {
			continue
		}
		value := "?"
		if v, ok := s.constraintValue(ctx, claim, r, *c.MatchAttribute); ok {
			value = v
		}
		out = append(out, fmt.Sprintf("%s %s, with %s", *c.MatchAttribute, value, strings.Join(with, ", ")))
	}
	return out
}

// constraintValue is what a constraint on attr sees of an allocated
// device: the request's derived attribute of that name, else the device's
// attribute (one of its driver's domain published unqualified).
func (s *Snapshot) constraintValue(ctx context.Context, claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult, attr resourceapi.FullyQualifiedName) (string, bool) {
	dev := s.device(r.Driver, r.Pool, r.Device)
	if dev == nil {
		return "", false
	}
	a, ok := constraintAttribute(ctx, requestDerived(claim, r.Request), r.Driver, dev, attr)
	if !ok {
		return "", false
	}
	return attributeText(a), true
}

// constraintAttribute is the attribute a matchAttribute constraint on
// attr sees of a device for a request with these derived attributes: the
// derived one of that name, evaluated as the allocator does, else the
// device's own (one of its driver's domain published unqualified).
func constraintAttribute(ctx context.Context, derived []resourceapi.DeviceDerivedAttribute, driver string, dev *resourceapi.Device, attr resourceapi.FullyQualifiedName) (resourceapi.DeviceAttribute, bool) {
	for _, d := range derived {
		if d.Name != attr {
			continue
		}
		v, err := devices.Derive(ctx, d.Expression, devices.Input(driver, dev))
		if err != nil || v == nil {
			return resourceapi.DeviceAttribute{}, false
		}
		return *v, true
	}
	name := string(attr)
	if id, own := strings.CutPrefix(name, driver+"/"); own {
		if a, ok := dev.Attributes[resourceapi.QualifiedName(id)]; ok {
			return a, true
		}
	}
	a, ok := dev.Attributes[resourceapi.QualifiedName(name)]
	return a, ok
}

// attributeValues are an attribute's values as a constraint compares
// them: a scalar is a set of one, a list the set of its values.
func attributeValues(a resourceapi.DeviceAttribute) []string {
	if v, ok := devices.AttributeString(a); ok {
		return []string{v}
	}
	return listValues(a)
}

// listValues are a list attribute's values as text, none for a plain one.
func listValues(a resourceapi.DeviceAttribute) []string {
	var vs []string
	for _, v := range a.IntValues {
		vs = append(vs, strconv.FormatInt(v, 10))
	}
	for _, v := range a.BoolValues {
		vs = append(vs, strconv.FormatBool(v))
	}
	vs = append(vs, a.StringValues...)
	return append(vs, a.VersionValues...)
}

// requestDerived are the derived attributes of a claim's request (or
// subrequest, "request/subrequest").
func requestDerived(claim *resourceapi.ResourceClaim, request string) []resourceapi.DeviceDerivedAttribute {
	parent, sub, _ := strings.Cut(request, "/")
	for _, req := range claim.Spec.Devices.Requests {
		if req.Name != parent {
			continue
		}
		if sub == "" && req.Exactly != nil {
			return req.Exactly.DerivedAttributes
		}
		for _, alt := range req.FirstAvailable {
			if alt.Name == sub {
				return alt.DerivedAttributes
			}
		}
	}
	return nil
}

// attributeText writes an attribute's value, a list as [a, b].
func attributeText(a resourceapi.DeviceAttribute) string {
	vs := listValues(a)
	switch {
	case a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil:
		return "[" + strings.Join(vs, ", ") + "]"
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}
