package lab_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
)

// assertTaintRuleSelectors shows what a DeviceTaintRule's selector means
// to the lab's scheduler, as Kubernetes 1.38 will have it: a rule without
// deviceSelector taints no device (a pod's claim is allocated beside it),
// one with an empty selector taints every device (the next claim waits,
// the running pod stays).
func assertTaintRuleSelectors(ctx context.Context, t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	rules := client.ResourceV1().DeviceTaintRules()
	// What it made goes when it returns: the lab's later checks see no rule.
	var undo []func(context.Context)
	defer func() {
		for _, f := range slices.Backward(undo) {
			f(context.WithoutCancel(ctx))
		}
	}()
	rule := func(name string, sel *resourceapi.DeviceTaintSelector) {
		t.Helper()
		r := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: sel,
			Taint:          resourceapi.DeviceTaint{Key: "example.com/" + name, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		}}
		if _, err := rules.Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating DeviceTaintRule %s: %v", name, err)
		}
		undo = append(undo, func(ctx context.Context) { _ = rules.Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	pod := func(name string) {
		t.Helper()
		undo = append(undo, claimPod(ctx, t, client, name))
	}
	// state is the pod's phase and whether the scheduler found it
	// unschedulable, with its message.
	state := func(name string) (v1.PodPhase, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", "", err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return p.Status.Phase, c.Message, nil
			}
		}
		return p.Status.Phase, "", nil
	}

	rule("no-selector", nil)
	var phase v1.PodPhase
	pod("beside-no-selector")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		phase, _, err = state("beside-no-selector")
		return err == nil && phase == v1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("with a DeviceTaintRule without deviceSelector, a pod's GPU claim was not allocated and run within a minute (phase %s): the rule tainted devices", phase)
	}

	rule("empty-selector", &resourceapi.DeviceTaintSelector{})
	pod("under-empty-selector")
	var msg string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		phase, msg, err = state("under-empty-selector")
		return err == nil && msg != "", nil
	})
	if err != nil || phase == v1.PodRunning {
		t.Errorf("with a DeviceTaintRule of an empty selector, a pod's GPU claim: phase %s, unschedulable %q, %v; want it unschedulable", phase, msg, err)
	}
	if c, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "under-empty-selector", metav1.GetOptions{}); err != nil || c.Status.Allocation != nil {
		t.Errorf("the claim under an empty selector is allocated: %v", fmt.Sprint(c.Status.Allocation, err))
	}
	if phase, _, err := state("beside-no-selector"); err != nil || phase != v1.PodRunning {
		t.Errorf("a NoSchedule rule disturbed the running pod: phase %s, %v", phase, err)
	}
}

// claimPod creates a claim for one GPU of the lab's driver and a busybox
// pod that uses it, both called name, in the default namespace, and
// returns what deletes them.
func claimPod(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) func(context.Context) {
	t.Helper()
	claims := client.ResourceV1().ResourceClaims("default")
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpu.ClassAny}}}},
	}}
	if _, err := claims.Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers:     []v1.Container{{Name: "app", Image: "busybox", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
	}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) {
		_ = client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = claims.Delete(ctx, name, metav1.DeleteOptions{})
	}
}
