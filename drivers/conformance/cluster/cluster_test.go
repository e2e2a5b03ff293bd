package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The device-taints check taints one device, one it was allocated itself,
// named by driver, pool and device; it shows that device refused while
// tainted and allocated once the rule is gone; the rule does not outlive
// the check.
func TestDeviceTaintsTaintsOnlyTheDeviceItWasAllocated(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	ctx := context.Background()
	if err := k.deviceTaints(ctx, t, k); err != nil {
		t.Fatal(err)
	}
	k.cleanup(ctx, t)
	rules := f.createdRules()
	if len(rules) != 1 {
		t.Fatalf("the check created %d DeviceTaintRules, want 1", len(rules))
	}
	for _, r := range rules {
		sel := r.rule.Spec.DeviceSelector
		if sel == nil || sel.Driver == nil || sel.Pool == nil || sel.Device == nil {
			t.Fatalf("DeviceTaintRule %s selects %+v: want one device, named by driver, pool and device", r.rule.Name, sel)
		}
		device := *sel.Driver + "/" + *sel.Pool + "/" + *sel.Device
		if !r.allocatedBefore[device] {
			t.Errorf("DeviceTaintRule %s taints %s, which the check had not been allocated (allocated before: %v)", r.rule.Name, device, r.allocatedBefore)
		}
		if _, err := f.client.ResourceV1().DeviceTaintRules().Get(ctx, r.rule.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DeviceTaintRule %s outlives the check: %v", r.rule.Name, err)
		}
	}
}

// A scheduler that allocates a tainted device fails the check.
func TestDeviceTaintsFailsWhenTheTaintIsIgnored(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	ctx := context.Background()
	f.ignoreTaints.Store(true)
	err := k.deviceTaints(ctx, t, k)
	if err == nil || !strings.Contains(err.Error(), "scheduled") {
		t.Fatalf("got %v, want the pod scheduled while its device was tainted", err)
	}
	k.cleanup(ctx, t)
	if rules, err := k.client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{}); err != nil || len(rules.Items) > 0 {
		t.Errorf("after the check failed, DeviceTaintRules remain: %v, %v", rules, err)
	}
}

// The opaque-config check passes only on the kubelet's report that the
// driver refused the invalid configuration, and fails when the pod runs or
// when no such report comes, however long the pod has been waiting.
func TestOpaqueConfigPassesOnlyOnEvidence(t *testing.T) {
	for _, tc := range []struct {
		refuse string
		// timeout of the check, beyond the 10 s after which the pod
		// was once taken as refused.
		timeout time.Duration
		wantErr string
	}{
		{refuse: refuseWithEvent},
		{refuse: prepareAnyway, wantErr: "runs"},
		{refuse: refuseSilently, timeout: 11 * time.Second, wantErr: "FailedPrepareDynamicResources event for pod invalid"},
	} {
		t.Run(tc.refuse, func(t *testing.T) {
			_, k := newFakeCluster(t, tc.refuse)
			if tc.timeout > 0 {
				k.m.Timeouts.PodRunning = tc.timeout
			}
			err := k.opaqueConfig(context.Background(), t, k)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

// Every namespace, claim, pod and DeviceTaintRule a check creates carries
// the suite's labels, and the cleanup removes them all, also after a check
// that ended with its context cancelled.
func TestCreatedObjectsAreLabelledAndRemoved(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	ctx, cancel := context.WithCancel(context.Background())
	// The device-taints check creates a claim, a pod and a rule and
	// leaves a pod and its claim, allocated, for the cleanup.
	if err := k.deviceTaints(ctx, t, k); err != nil {
		t.Fatal(err)
	}
	for _, r := range f.createdRules() {
		wantSuiteLabels(t, "DeviceTaintRule "+r.rule.Name, r.rule.Labels)
	}
	ns, err := f.client.CoreV1().Namespaces().Get(ctx, k.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantSuiteLabels(t, "namespace "+ns.Name, ns.Labels)
	claims, err := f.client.ResourceV1().ResourceClaims(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) == 0 {
		t.Fatalf("claims: %v, %v", claims, err)
	}
	for _, c := range claims.Items {
		wantSuiteLabels(t, "claim "+c.Name, c.Labels)
	}
	pods, err := f.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	for _, p := range pods.Items {
		wantSuiteLabels(t, "pod "+p.Name, p.Labels)
	}

	// A rule of a check that then ended with its context.
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}
	if _, err := f.client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.rules = append(k.rules, rule.Name)
	cancel()
	k.cleanup(ctx, t)
	bg := context.Background()
	if rules, err := f.client.ResourceV1().DeviceTaintRules().List(bg, metav1.ListOptions{}); err != nil || len(rules.Items) > 0 {
		t.Errorf("DeviceTaintRules remain: %v, %v", rules, err)
	}
	if pods, err := f.client.CoreV1().Pods(k.ns).List(bg, metav1.ListOptions{}); err != nil || len(pods.Items) > 0 {
		t.Errorf("pods remain: %v, %v", pods, err)
	}
	if claims, err := f.client.ResourceV1().ResourceClaims(k.ns).List(bg, metav1.ListOptions{}); err != nil || len(claims.Items) > 0 {
		t.Errorf("claims remain: %v, %v", claims, err)
	}
	if _, err := f.client.CoreV1().Namespaces().Get(bg, k.ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s remains: %v", k.ns, err)
	}
}

func wantSuiteLabels(t *testing.T, what string, labels map[string]string) {
	t.Helper()
	if labels["app.kubernetes.io/managed-by"] != "dralab-conformance" {
		t.Errorf("%s is not labelled app.kubernetes.io/managed-by=dralab-conformance: %v", what, labels)
	}
	if _, ok := labels["conformance.dralab.dev/run"]; !ok {
		t.Errorf("%s has no conformance.dralab.dev/run label: %v", what, labels)
	}
}
