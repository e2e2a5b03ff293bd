package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// A run first removes what an interrupted run left, found by the suite's
// managed-by label, and nothing else: not its own objects, not an object
// without the label, however much its name looks like the suite's.
func TestRemoveLeftovers(t *testing.T) {
	earlier := map[string]string{LabelManagedBy: ManagedBy, LabelRun: "earlier"}
	current := map[string]string{LabelManagedBy: ManagedBy, LabelRun: "current"}
	other := map[string]string{LabelManagedBy: "helm", LabelRun: "earlier"}
	meta := func(name, ns string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
	}
	client := fake.NewClientset(
		&v1.Namespace{ObjectMeta: meta("conformance-old", "", earlier)},
		&v1.Namespace{ObjectMeta: meta("conformance-now", "", current)},
		&v1.Namespace{ObjectMeta: meta("conformance-lookalike", "", nil)},
		&v1.Namespace{ObjectMeta: meta("team", "", other)},
		&resourceapi.DeviceTaintRule{ObjectMeta: meta("conformance-old", "", earlier)},
		&resourceapi.DeviceTaintRule{ObjectMeta: meta("conformance-now", "", current)},
		&resourceapi.DeviceTaintRule{ObjectMeta: meta("maintenance", "", nil)},
		&resourceapi.ResourceClaim{ObjectMeta: meta("old", "conformance-old", earlier)},
		&resourceapi.ResourceClaim{ObjectMeta: meta("stray", "team", earlier)},
		&resourceapi.ResourceClaim{ObjectMeta: meta("now", "conformance-now", current)},
		&resourceapi.ResourceClaim{ObjectMeta: meta("training", "team", nil)},
	)
	ctx := context.Background()
	removed, err := removeLeftovers(ctx, client, "current", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{"DeviceTaintRule conformance-old", "claim conformance-old/old", "claim team/stray", "namespace conformance-old"}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	names := func(list runtime.Object) []string {
		var out []string
		switch l := list.(type) {
		case *v1.NamespaceList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		case *resourceapi.DeviceTaintRuleList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		case *resourceapi.ResourceClaimList:
			for _, o := range l.Items {
				out = append(out, o.Namespace+"/"+o.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	namespaces, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(namespaces), []string{"conformance-lookalike", "conformance-now", "team"}; !slices.Equal(got, want) {
		t.Errorf("namespaces left: %v, want %v", got, want)
	}
	rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(rules), []string{"conformance-now", "maintenance"}; !slices.Equal(got, want) {
		t.Errorf("DeviceTaintRules left: %v, want %v", got, want)
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(claims), []string{"conformance-now/now", "team/training"}; !slices.Equal(got, want) {
		t.Errorf("claims left: %v, want %v", got, want)
	}
}

// A cluster that does not serve DeviceTaintRules has none left: the
// leftovers of every other kind are still removed, and no check fails on
// the missing API.
func TestRemoveLeftoversWithoutDeviceTaintRules(t *testing.T) {
	earlier := map[string]string{LabelManagedBy: ManagedBy, LabelRun: "earlier"}
	client := fake.NewClientset(&v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "conformance-old", Labels: earlier}})
	client.PrependReactor("*", "devicetaintrules", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(resourceapi.Resource("devicetaintrules"), "")
	})
	removed, err := removeLeftovers(context.Background(), client, "current", 5*time.Second)
	if err != nil {
		t.Fatalf("removeLeftovers on a cluster without DeviceTaintRules: %v", err)
	}
	if want := []string{"namespace conformance-old"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
}
