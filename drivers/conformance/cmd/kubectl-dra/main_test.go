package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const drv = "gpu.example.com"

// tierClass selects the devices whose tier attribute is tier.
func tierClass(tier string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: tier},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].tier == %q`, drv, drv, tier)}}}}}
}

// node is a node whose slice publishes n GPUs of a tier.
func node(name, tier string, n int) []runtime.Object {
	sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: drv, NodeName: ptr.To(name), Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}}}
	for i := range n {
		sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"tier": {StringValue: ptr.To(tier)}, "productName": {StringValue: ptr.To(strings.ToUpper(tier))}}})
	}
	return []runtime.Object{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, sl}
}

// fallback is the article's prioritized list: an H100, else an A100, else
// an L4, count GPUs on one node.
func fallback(count int64) resourceapi.DeviceRequest {
	var subs []resourceapi.DeviceSubRequest
	for _, t := range []string{"h100", "a100", "l4"} {
		subs = append(subs, resourceapi.DeviceSubRequest{Name: t, DeviceClassName: t, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count})
	}
	return resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: subs}
}

// pod is a pod of a claim of its own name; on a node (with its claim
// allocated devices, by subrequest) or waiting.
func pod(name, nodeName string, created int, req resourceapi.DeviceRequest, allocated ...string) []runtime.Object {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+created), 0))},
		Spec: v1.PodSpec{NodeName: nodeName, ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}}}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
	if nodeName == "" {
		p.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 3 cannot allocate all claims."}}}
	} else {
		p.Status.Phase = v1.PodRunning
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: "uid-" + "name"}}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, a := range allocated {
			sub, dev, _ := strings.Cut(a, "=")
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: "gpu/" + sub, Driver: drv, Pool: nodeName, Device: dev})
		}
	}
	return []runtime.Object{p, c}
}

// cascade is the article's cluster with its eight GPUs held: two H100s,
// two A100s, four L4s, each held by a pod of the prioritized list, and a
// ninth pod waiting.
func cascade() []runtime.Object {
	objs := []runtime.Object{tierClass("h100"), tierClass("a100"), tierClass("l4")}
	objs = append(objs, node("gpu-h100", "h100", 2)...)
	objs = append(objs, node("gpu-a100", "a100", 2)...)
	objs = append(objs, node("gpu-l4", "l4", 4)...)
	held := []struct{ node, sub string }{{"gpu-h100", "h100"}, {"gpu-h100", "h100"}, {"gpu-a100", "a100"}, {"gpu-a100", "a100"},
		{"gpu-l4", "l4"}, {"gpu-l4", "l4"}, {"gpu-l4", "l4"}, {"gpu-l4", "l4"}}
	perNode := map[string]int{}
	for i, h := range held {
		objs = append(objs, pod(fmt.Sprintf("fallback-%d", i), h.node, i, fallback(1), fmt.Sprintf("%s=gpu-%d", h.sub, perNode[h.node]))...)
		perNode[h.node]++
	}
	return append(objs, pod("fallback-8", "", 8, fallback(1))...)
}

// served makes a fake client that serves resource.k8s.io/v1.
func served(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.Resources = []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceclaims"}, {Name: "resourceslices"}}}}
	return c
}

// kubectlDRA runs the command against client, in namespace default.
func kubectlDRA(t *testing.T, client kubernetes.Interface, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr, func(o *options) (kubernetes.Interface, string, error) {
		ns := o.namespace
		if ns == "" {
			ns = "default"
		}
		return client, ns, nil
	})
	return stdout.String(), stderr.String(), code
}

// With every GPU of the cascade held, why of the ninth pod names each of
// the eight holders, by the subrequest the pod's request tries (H100, then
// A100, then L4), counts what is free per node, and says AllAllocated.
func TestWhyNamesTheHolders(t *testing.T) {
	client := served(cascade()...)
	out, errOut, code := kubectlDRA(t, client, "why", "fallback-8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for i := range 8 {
		if !strings.Contains(out, fmt.Sprintf("pod fallback-%d (claim fallback-%d)", i, i)) {
			t.Errorf("the holder fallback-%d is not named:\n%s", i, out)
		}
	}
	for _, want := range []string{"Pod default/fallback-8: Pending, not scheduled", "Why: AllAllocated",
		"gpu/h100  gpu-h100  gpu.example.com/gpu-h100/gpu-0", "gpu/l4 needs 1: at most 0 free on any node (gpu-l4 0)"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// The order tried: every H100 before any A100, every A100 before any L4.
	if h, a, l := strings.Index(out, "gpu/h100 "), strings.Index(out, "gpu/a100 "), strings.Index(out, "gpu/l4 "); !(h < a && a < l) {
		t.Errorf("candidates not in the order tried (h100 %d, a100 %d, l4 %d):\n%s", h, a, l, out)
	}

	jsonOut, _, code := kubectlDRA(t, client, "why", "pod/fallback-8", "-o", "json")
	var e Explanation
	if err := json.Unmarshal([]byte(jsonOut), &e); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v:\n%s", code, err, jsonOut)
	}
	if len(e.Pods) != 1 || len(e.Pods[0].Candidates) != 8 || e.Pods[0].ReasonCode != "AllAllocated" {
		t.Fatalf("-o json: %+v", e)
	}
	// The allocator's verdict: no node holds the claim.
	if v := e.Pods[0].Verdict; v == nil || len(v.Nodes) != 3 || len(v.Fits()) != 0 || v.Nodes[0].Node != "gpu-a100" {
		t.Errorf("-o json: verdict %+v, want the three nodes, none fitting", v)
	}
	for _, c := range e.Pods[0].Candidates {
		if c.State != "Allocated" || len(c.Holders) != 1 || len(c.Holders[0].Pods) != 1 || c.Holders[0].Subrequest != c.Subrequest {
			t.Errorf("candidate %+v: want Allocated, held by one pod through the same subrequest", c)
		}
	}
}

// devices shows every GPU with its holder and the subrequest chosen for
// it; claims every claim with its allocation.
func TestDevicesAndClaims(t *testing.T) {
	client := served(cascade()...)
	out, errOut, code := kubectlDRA(t, client, "devices")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"gpu-h100 gpu-h100 gpu-1 H100 Allocated gpu/h100 pod default/fallback-1 (claim default/fallback-1)",
		"gpu-l4 gpu-l4 gpu-3 L4 Allocated gpu/l4 pod default/fallback-7 (claim default/fallback-7)",
		"Free per node: gpu-a100 0 of 2, gpu-h100 0 of 2, gpu-l4 0 of 4"} {
		if !strings.Contains(flat, want) {
			t.Errorf("devices lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "Allocated"); n != 8 {
		t.Errorf("%d devices Allocated, want 8:\n%s", n, out)
	}
	out, _, code = kubectlDRA(t, client, "devices", "--node", "gpu-h101")
	if code != 1 {
		t.Errorf("devices of an unknown node: exit %d:\n%s", code, out)
	}
	out, _, _ = kubectlDRA(t, client, "claims", "-o", "wide")
	flat = strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "default fallback-2 allocated,reserved gpu-a100 gpu/a100=gpu.example.com/gpu-a100/gpu-0 pod/fallback-2") ||
		!strings.Contains(flat, "default fallback-8 pending - - -") {
		t.Errorf("claims:\n%s", out)
	}
}

// A pod asking for two GPUs where two nodes have one free each is told so
// per node: two are free in the cluster, but at most one on any node.
func TestWhyCountsPerNode(t *testing.T) {
	objs := []runtime.Object{tierClass("h100"), tierClass("a100"), tierClass("l4")}
	objs = append(objs, node("n1", "h100", 2)...)
	objs = append(objs, node("n2", "h100", 2)...)
	objs = append(objs, pod("one", "n1", 0, fallback(1), "h100=gpu-0")...)
	objs = append(objs, pod("other", "n2", 1, fallback(1), "h100=gpu-1")...)
	objs = append(objs, pod("two", "", 2, fallback(2))...)
	out, errOut, code := kubectlDRA(t, served(objs...), "why", "two")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"NotOnOneNode", "needs 2 devices on one node, and 2 matching devices are free, but at most 1 on any node (n1 1, n2 1)",
		"gpu/h100 needs 2: at most 1 free on any node (n1 1, n2 1)"} {
		if !strings.Contains(flat, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// A gang of two pods, each asking one GPU, whose PodGroup keeps it in one
// rack: two GPUs are free, one in each rack, so no rack holds the group.
// why podgroup/NAME explains each pod by the group, counting what is free
// per rack and naming what holds the rest.
func TestWhyPodGroup(t *testing.T) {
	objs := []runtime.Object{tierClass("h100"), tierClass("a100"), tierClass("l4")}
	for _, n := range []struct{ name, rack string }{{"n1", "a"}, {"n2", "b"}} {
		nodeObjs := node(n.name, "h100", 2)
		nodeObjs[0].(*v1.Node).Labels = map[string]string{"example.com/rack": n.rack}
		objs = append(objs, nodeObjs...)
		objs = append(objs, pod("other-"+n.rack, n.name, 0, fallback(1), "h100=gpu-0")...)
	}
	objs = append(objs, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default"},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: "example.com/rack"}}}}})
	for i := range 2 {
		member := pod(fmt.Sprintf("train-%d", i), "", 1+i, fallback(1))
		member[0].(*v1.Pod).Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")}
		objs = append(objs, member...)
	}
	out, errOut, code := kubectlDRA(t, served(objs...), "why", "podgroup/train")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"train-0", "train-1", "TopologyShort",
		`gang train (minCount 2, 2 pods, 0 bound): as gpu/h100, its 2 unbound pods need 2 devices of h100 for request "gpu" (1 each) in one example.com/rack domain; a 1 free (held by other-a); b 1 free (held by other-b); 2 free in all; or as gpu/a100, its 2 unbound pods need 2 devices of a100 for request "gpu" (1 each) in one example.com/rack domain, and no node labelled example.com/rack has a matching device; or as gpu/l4`} {
		if !strings.Contains(flat, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(flat, "TopologyShort"); n != 2 {
		t.Errorf("TopologyShort %d times, want once per pod:\n%s", n, out)
	}
	// Unknown groups are said as such, with the group that exists.
	if _, errOut, code := kubectlDRA(t, served(objs...), "why", "podgroup/trian"); code == 0 || !strings.Contains(errOut, `"train"`) {
		t.Errorf("why podgroup/trian: exit %d, %q: want an error naming train", code, errOut)
	}
}

// Bad input and clusters that lack something get one line saying what was
// searched or what is missing, and nothing is written.
func TestBadInputAndClusters(t *testing.T) {
	client := served(cascade()...)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"why", "fallback-9"}, 1, `pod "fallback-9" not found in namespace "default"; did you mean "fallback-0"?`},
		{[]string{"why", "fallback-8", "-n", "team-a"}, 1, `pod "fallback-8" not found in namespace "team-a" (there is no pod there)`},
		{[]string{"why", "claim/fallback-88"}, 1, `claim "fallback-88" not found in namespace "default"; did you mean "fallback-8"?`},
		{[]string{"why", "podgroup/gang"}, 1, `podgroup "gang" not found`},
		{[]string{"why", "deployment/web"}, 1, `unknown kind "deployment"`},
		{[]string{"why"}, 2, "why: takes 1 argument(s), got 0"},
		{[]string{"why", "fallback-8", "--feature-gates", "DRAFoo=true"}, 2, `feature gate "DRAFoo" does not switch the allocator; those that do: DRAAdminAccess`},
		{[]string{"why", "fallback-8", "--feature-gates", "DRAListTypeAttributes"}, 2, `"DRAListTypeAttributes": want Gate=true or Gate=false`},
		{[]string{"whence"}, 2, `unknown command "whence"`},
		{[]string{"devices", "-o", "xml"}, 2, `--output "xml"`},
	} {
		out, errOut, code := kubectlDRA(t, client, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q %q; want exit %d saying %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	// -A searches every namespace.
	if out, errOut, code := kubectlDRA(t, client, "why", "-A", "fallback-8"); code != 0 || !strings.Contains(out, "default/fallback-8") {
		t.Errorf("why -A: exit %d: %s %s", code, out, errOut)
	}

	noDRA := fake.NewClientset()
	if _, errOut, code := kubectlDRA(t, noDRA, "devices"); code != 1 || !strings.Contains(errOut, "the cluster serves no resource.k8s.io/v1") {
		t.Errorf("a cluster without DRA: exit %d: %s", code, errOut)
	}

	forbidden := served(cascade()...)
	forbidden.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "", fmt.Errorf(`User "ann" cannot list resource "resourceslices" in API group "resource.k8s.io" at the cluster scope`))
	})
	if _, errOut, code := kubectlDRA(t, forbidden, "devices"); code != 1 || !strings.Contains(errOut, `cannot list resource "resourceslices"`) || !strings.Contains(errOut, "clusterrole.yaml") {
		t.Errorf("a forbidden read: exit %d: %s", code, errOut)
	}

	older := served(cascade()...)
	older.PrependReactor("list", "devicetaintrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, "")
	})
	if out, errOut, code := kubectlDRA(t, older, "devices"); code != 0 || strings.Count(errOut, "\n") != 2 || !strings.Contains(errOut, "does not serve devicetaintrules.resource.k8s.io") ||
		!strings.Contains(errOut, "the allocator's features are Kubernetes 1.37's defaults") || !strings.Contains(out, "gpu-h100") {
		t.Errorf("a cluster without DeviceTaintRules: exit %d: %q %q", code, out, errOut)
	}

	for _, a := range append(client.Actions(), forbidden.Actions()...) {
		if v := a.GetVerb(); v != "list" && v != "get" {
			t.Errorf("kubectl dra wrote: %s %s", v, a.GetResource())
		}
	}
}
