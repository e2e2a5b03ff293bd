package allocation

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Read lists a page at a time where the server pages: it asks for
// PageSize objects and follows each continue token to the end; a token
// that expired starts the list again whole. What the cluster does not
// serve is read as none and named.
func TestReadPages(t *testing.T) {
	defer func(n int64) { PageSize = n }(PageSize)
	PageSize = 3
	var all []resourceapi.ResourceSlice
	for i := range 8 {
		all = append(all, resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)},
			Spec: resourceapi.ResourceSliceSpec{Driver: drv, Pool: resourceapi.ResourcePool{Name: fmt.Sprintf("p%d", i), ResourceSliceCount: 1}}})
	}
	client := fake.NewClientset()
	var asked []string
	expireOnce := true
	client.PrependReactor("list", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		asked = append(asked, fmt.Sprintf("limit=%d continue=%q", o.Limit, o.Continue))
		if o.Continue == "6" && expireOnce {
			expireOnce = false
			return true, nil, apierrors.NewResourceExpired("the continue token expired")
		}
		start, _ := strconv.Atoi(o.Continue)
		end := len(all)
		if o.Limit > 0 {
			end = min(end, start+int(o.Limit))
		}
		list := &resourceapi.ResourceSliceList{Items: all[start:end]}
		if end < len(all) {
			list.Continue = strconv.Itoa(end)
		}
		return true, list, nil
	})
	client.PrependReactor("list", "devicetaintrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, "")
	})
	s, err := Read(context.Background(), client, "", Vocabulary{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`limit=3 continue=""`, `limit=3 continue="3"`, `limit=3 continue="6"`, `limit=0 continue=""`}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("asked %q, want %q", asked, want)
	}
	if len(s.Slices) != len(all) {
		t.Errorf("read %d slices, want %d (each once)", len(s.Slices), len(all))
	}
	if fmt.Sprint(s.NotServed) != "[devicetaintrules.resource.k8s.io]" {
		t.Errorf("NotServed = %v", s.NotServed)
	}
}

// A cluster of 1.33–1.36 serves DeviceTaintRules at v1beta2 only: Read
// takes them from there, and their taints block devices as v1's do.
func TestReadOlderTaintRules(t *testing.T) {
	rule := &resourcev1beta2.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maintenance"}, Spec: resourcev1beta2.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1beta2.DeviceTaintSelector{Driver: ptr.To(drv), Pool: ptr.To("n"), Device: ptr.To("gpu-0")},
		Taint:          resourcev1beta2.DeviceTaint{Key: "example.com/maintenance", Effect: resourcev1beta2.DeviceTaintEffectNoSchedule}}}
	client := fake.NewClientset(rule)
	client.PrependReactor("list", "devicetaintrules", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetResource().Version == "v1" {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, "")
		}
		return false, nil, nil
	})
	s, err := Read(context.Background(), client, "", Vocabulary{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.TaintRules) != 1 || s.TaintRules[0].Spec.Taint.Key != "example.com/maintenance" || ptr.Deref(s.TaintRules[0].Spec.DeviceSelector.Device, "") != "gpu-0" || len(s.NotServed) != 0 {
		t.Fatalf("rules %+v, not served %v; want the v1beta2 rule read as v1", s.TaintRules, s.NotServed)
	}
	if got := s.DeviceTaints(drv, "n", "gpu-0"); len(got) != 0 {
		t.Errorf("no slice publishes gpu-0, yet it has taints %v", got)
	}
	s = NewSnapshot(Vocabulary{}, "", s.Pods, s.AllClaims, []resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Driver: drv,
		Pool: resourceapi.ResourcePool{Name: "n", ResourceSliceCount: 1}, Devices: []resourceapi.Device{{Name: "gpu-0"}}}}}, nil, s.TaintRules, nil)
	if got := s.DeviceTaints(drv, "n", "gpu-0"); fmt.Sprint(got) != "[example.com/maintenance:NoSchedule]" {
		t.Errorf("gpu-0's taints %v, want the rule's", got)
	}
}

// The allocator's features are the API server's feature gates, read from
// the kubernetes_feature_enabled samples of its metrics.
func TestFeatureGatesFromMetrics(t *testing.T) {
	raw := []byte(`# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="DRAConsumableCapacity",stage="BETA"} 0
kubernetes_feature_enabled{name="DRAListTypeAttributes",stage="ALPHA"} 1
kubernetes_feature_enabled{name="DRAPrioritizedList",stage=""} 1
apiserver_request_total{code="200",verb="GET"} 12
`)
	gates := featureGatesFromMetrics(raw)
	if len(gates) != 3 || gates["DRAConsumableCapacity"] || !gates["DRAListTypeAttributes"] || !gates["DRAPrioritizedList"] {
		t.Fatalf("gates %v", gates)
	}
	f, err := WithGates(DefaultFeatures, gates)
	if err != nil || f.ConsumableCapacity || !f.ListTypeAttributes || !f.PartitionableDevices {
		t.Errorf("features %+v, %v", f, err)
	}
	if _, err := WithGates(DefaultFeatures, map[string]bool{"DRAFoo": true}); err == nil || !strings.Contains(err.Error(), "DRAAdminAccess") {
		t.Errorf("an unknown gate: %v, want an error naming the known ones", err)
	}
}
