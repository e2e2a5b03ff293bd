package scenarios

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// On a shared cluster, taintAllocated taints no device that a claim of
// another namespace holds too (a share, or admin access): it refuses, naming
// the device and the stranger's claim, before it creates any rule. A device
// only the scenario's own claims hold is tainted.
func TestTaintAllocatedRefusesADeviceAnotherHolds(t *testing.T) {
	const ns = "dralab-device-taint-x"
	claim := func(namespace, name string, devices ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, d := range devices {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpu.DriverName, Pool: "n1", Device: d})
		}
		return c
	}
	pod := func(name, claimName string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1.PodSpec{NodeName: "n1", ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claimName)}}},
			Status:     v1.PodStatus{Phase: v1.PodRunning},
		}
	}
	client := fake.NewClientset(
		pod("inference-a", "ours-a"), claim(ns, "ours-a", "gpu-0"),
		pod("inference-b", "ours-b"), claim(ns, "ours-b", "gpu-1"),
		// A tenant's claim shares gpu-1.
		claim("team", "training", "gpu-1"),
	)
	r := &run{Runner: &Runner{Client: client}, ns: ns}
	ctx := context.Background()

	err := r.taintAllocated(ctx, &TaintAllocated{Pods: "inference-*", Key: "example.com/failing", Effect: "NoExecute"})
	if err == nil || !strings.Contains(err.Error(), "n1/gpu-1") || !strings.Contains(err.Error(), "team/training") {
		t.Fatalf("taintAllocated over a device a tenant shares = %v; want a refusal naming the device and the tenant's claim", err)
	}
	rules, lerr := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(rules.Items) != 0 || len(r.gone) != 0 || len(r.clusterObjects) != 0 {
		t.Errorf("the refused step left %d rules, %v gone, %d cluster objects; want nothing applied", len(rules.Items), r.gone, len(r.clusterObjects))
	}
	rows, err := allocation.Allocations(ctx, client, ns, nodedrivers.Vocabulary)
	if err != nil {
		t.Fatal(err)
	}
	rows = slices.DeleteFunc(rows, func(row allocation.Row) bool { return row.Pod != "inference-a" })
	if len(rows) != 1 {
		t.Fatalf("inference-a has %d rows; want 1", len(rows))
	}
	if err := r.onlyOurs(ctx, rows); err != nil {
		t.Errorf("onlyOurs for gpu-0, which only the scenario's claim holds: %v", err)
	}
}

// A manifest field the cluster's API server drops (its feature gate is
// off there) makes the scenario unmet, naming the field, not failed.
func TestDroppedFieldIsUnmet(t *testing.T) {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClient(scheme)
	dyn.PrependReactor("create", "resourceclaimtemplates", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		unstructured.RemoveNestedField(obj.Object, "spec", "spec", "devices", "constraints")
		return true, obj, nil
	})
	gvk := schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(gvk, meta.RESTScopeNamespace)
	r := &run{Runner: &Runner{Dynamic: dyn, Mapper: mapper}, ns: "dralab-x"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": map[string]any{"name": "pair"},
		"spec": map[string]any{"spec": map[string]any{"devices": map[string]any{
			"constraints": []any{map[string]any{"matchAttribute": "derived/numa"}},
		}}},
	}}
	err := r.apply(context.Background(), obj)
	if !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "dropped spec.spec.devices.constraints of ResourceClaimTemplate pair") {
		t.Fatalf("apply with a field the server drops = %v; want ErrUnmet naming the field", err)
	}
}

// A step that removed pods settles only once their devices are released:
// the pods gone, no claim reserved for one, none that one owned left. The
// next step's pods must not meet devices a removed pod still holds.
func TestSettledWaitsForTheRemovedPodsDevices(t *testing.T) {
	const ns = "dralab-gang-x"
	owned := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-a-0-gpus-x",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "job-a-0", UID: "u"}}}}
	reserved := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}}
	reserved.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "job-a-1", UID: "v"}}
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		objects []runtime.Object
		want    bool
	}{
		{"a claim the removed pod owned is left", []runtime.Object{owned}, false},
		{"a claim is reserved for a removed pod", []runtime.Object{reserved}, false},
		{"both released", nil, true},
	} {
		r := &run{Runner: &Runner{Client: fake.NewClientset(c.objects...)}, ns: ns, gone: []string{"job-a-0", "job-a-1"}}
		snap, err := allocation.Read(ctx, r.Client, ns, nodedrivers.Vocabulary)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.settled(ctx, snap); got != c.want {
			t.Errorf("%s: settled %v, want %v", c.name, got, c.want)
		}
	}
}
