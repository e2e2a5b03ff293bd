package cluster

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

func TestOverlapIsSetIntersection(t *testing.T) {
	i := func(v int64) *resourceapi.DeviceAttribute { return &resourceapi.DeviceAttribute{IntValue: &v} }
	is := func(v ...int64) *resourceapi.DeviceAttribute { return &resourceapi.DeviceAttribute{IntValues: v} }
	s := func(v string) *resourceapi.DeviceAttribute { return &resourceapi.DeviceAttribute{StringValue: &v} }
	for _, c := range []struct {
		name    string
		a, b    *resourceapi.DeviceAttribute
		overlap bool
		same    bool
	}{
		{"equal numbers", i(0), i(0), true, true},
		{"different numbers", i(0), i(1), false, false},
		{"a number in a list", i(1), is(0, 1), true, false},
		{"a number beside a list", i(2), is(0, 1), false, false},
		{"lists sharing one", is(0, 1), is(1, 2), true, false},
		{"disjoint lists", is(0, 1), is(2, 3), false, false},
		{"a list of one and its number", is(1), i(1), true, false},
		{"a number and its spelling", i(0), s("0"), false, false},
		{"none", nil, i(0), false, false},
	} {
		if got := overlap(c.a, c.b); got != c.overlap {
			t.Errorf("%s: overlap(%s, %s) = %v, want %v", c.name, valueString(c.a), valueString(c.b), got, c.overlap)
		}
		if got := overlap(c.b, c.a); got != c.overlap {
			t.Errorf("%s: overlap is not symmetric", c.name)
		}
		if got := sameValue(c.a, c.b); got != c.same {
			t.Errorf("%s: sameValue = %v, want %v", c.name, got, c.same)
		}
	}
}

func TestCELValue(t *testing.T) {
	for _, c := range []struct {
		a    resourceapi.DeviceAttribute
		want string
	}{
		{resourceapi.DeviceAttribute{IntValue: ptr.To[int64](3)}, "3"},
		{resourceapi.DeviceAttribute{StringValue: ptr.To(`pci0000:"15"`)}, `"pci0000:\"15\""`},
		{resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}, "true"},
		{resourceapi.DeviceAttribute{IntValues: []int64{0, 1}}, "[0, 1]"},
		{resourceapi.DeviceAttribute{StringValues: []string{"a", "b"}}, `["a", "b"]`},
	} {
		got, err := celValue(&c.a)
		if err != nil || got != c.want {
			t.Errorf("celValue(%+v) = %q, %v; want %q", c.a, got, err, c.want)
		}
	}
	if _, err := celValue(&resourceapi.DeviceAttribute{VersionValue: ptr.To("1.0.0")}); err == nil {
		t.Error("a version has no == literal, yet celValue wrote one")
	}
}

func TestPartnersHoldOneValueEach(t *testing.T) {
	dev := func(name string, a *resourceapi.DeviceAttribute) valued {
		return valued{devices.Device{Driver: "d", Pool: "p", Device: resourceapi.Device{Name: name}}, a}
	}
	list := dev("sd", &resourceapi.DeviceAttribute{IntValues: []int64{0, 1}})
	zero, one := dev("g0", &resourceapi.DeviceAttribute{IntValue: ptr.To[int64](0)}), dev("g4", &resourceapi.DeviceAttribute{IntValue: ptr.To[int64](1)})
	both := dev("other-sd", &resourceapi.DeviceAttribute{IntValues: []int64{1, 0}})
	x, y, ok := partners(list, []valued{both, list, zero, one})
	if !ok || x.Name != "g0" || y.Name != "g4" {
		t.Errorf("partners = %s, %s, %v; want g0 (0) and g4 (1)", x.Name, y.Name, ok)
	}
	if _, _, ok := partners(list, []valued{both, list, zero}); ok {
		t.Error("found partners with no device of value 1 but one that holds both")
	}
}
