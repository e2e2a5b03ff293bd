package allocation

import (
	"context"
	"slices"
	"sort"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A snapshot reads its rows in its vocabulary's words: the tier of each
// device and of a counting node, the partition's profile, the device's
// type and whether it is a time slice. The zero vocabulary reads the same
// allocations in the API's words alone: no tier, no profile, no type.
func TestRowsInAVocabulary(t *testing.T) {
	ctx := context.Background()
	dev := func(name, typ, profile string) resourceapi.Device {
		d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type": {StringValue: ptr.To(typ)}, "productName": {StringValue: ptr.To("H100")}}}
		if profile != "" {
			d.Attributes["profile"] = resourceapi.DeviceAttribute{StringValue: ptr.To(profile)}
		}
		return d
	}
	slice := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: drv, Pool: resourceapi.ResourcePool{Name: "n", ResourceSliceCount: 1},
		NodeName: ptr.To("n"), Devices: []resourceapi.Device{dev("gpu-0-mig-1g", "mig", "1g.10gb"), dev("gpu-1-ts-0", "time-slice", "")}}}
	claim := func(name, device string) resourceapi.ResourceClaim {
		return resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: drv, Pool: "n", Device: device}}}}}}
	}
	pod := func(name, claim, node string) v1.Pod {
		return v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1.PodSpec{NodeName: node,
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}}}
	}
	counting := v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "counting", Labels: map[string]string{"profile": "l4-24gb"}}}
	pods := []v1.Pod{pod("mig", "c-mig", "n"), pod("slice", "c-ts", "n"), {ObjectMeta: metav1.ObjectMeta{Name: "counted", Namespace: "ns"}, Spec: v1.PodSpec{NodeName: "counting"}}}
	claims := []resourceapi.ResourceClaim{claim("c-mig", "gpu-0-mig-1g"), claim("c-ts", "gpu-1-ts-0")}
	lab := Vocabulary{
		Tier: func(_ context.Context, driver string, d *resourceapi.Device) (string, error) {
			if driver == drv && *d.Attributes["productName"].StringValue == "H100" {
				return "h100", nil
			}
			return "", nil
		},
		NodeTier:         func(n *v1.Node) string { return map[string]string{"l4-24gb": "l4"}[n.Labels["profile"]] },
		ProfileAttribute: "profile",
		DeviceType: func(driver string, d *resourceapi.Device) string {
			if driver != drv {
				return ""
			}
			return *d.Attributes["type"].StringValue
		},
		TimeSliceType: "time-slice",
	}
	read := func(v Vocabulary) map[string]Row {
		s := NewSnapshot(v, "ns", slices.Clone(pods), claims, []resourceapi.ResourceSlice{slice}, nil, nil, []v1.Node{counting})
		rows, err := s.Rows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Row{}
		for _, r := range rows {
			out[r.Pod] = r
		}
		return out
	}
	rows := read(lab)
	if r := rows["mig"]; r.Tier != "h100" || r.Profile != "1g.10gb" || r.DeviceType != "mig" || r.TimeSlice || r.partition() != "MIG 1g.10gb" {
		t.Errorf("the MIG device's row in the lab's words: %+v", r)
	}
	if r := rows["slice"]; r.Tier != "h100" || r.DeviceType != "time-slice" || !r.TimeSlice || r.partition() != "time slice" {
		t.Errorf("the time slice's row in the lab's words: %+v", r)
	}
	if r := rows["counted"]; r.NodeTier != "l4" {
		t.Errorf("the counted pod's row in the lab's words names node tier %q, want l4", r.NodeTier)
	}
	for name, r := range read(Vocabulary{}) {
		if r.Tier != "" || r.NodeTier != "" || r.Profile != "" || r.DeviceType != "" || r.TimeSlice {
			t.Errorf("%s: the zero vocabulary named %+v", name, r)
		}
		if name != "counted" && (r.Device == "" || r.Product != "H100") {
			t.Errorf("%s: the zero vocabulary lost the allocation itself: %+v", name, r)
		}
	}
}

// Pods created in one second are in their names' order, a template's by
// their numbers.
func TestLessName(t *testing.T) {
	names := []string{"p-10", "worker", "p-9", "p-1", "inference", "p-0"}
	sort.Slice(names, func(i, j int) bool { return lessName(names[i], names[j]) })
	if want := []string{"inference", "p-0", "p-1", "p-9", "p-10", "worker"}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
}
