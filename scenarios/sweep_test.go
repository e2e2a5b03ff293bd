package scenarios

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
)

// The next run removes what an interrupted one left, by its labels: the
// namespace of a run no longer alive and the cluster-scoped objects that
// run made, and says what it removed. A live run's namespace and objects,
// and whatever no run made, stay.
func TestSweepRemovesWhatInterruptedRunsLeft(t *testing.T) {
	now := time.Now()
	ns := func(name string, until time.Time, managed bool) *v1.Namespace {
		n := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationAliveUntil: until.UTC().Format(time.RFC3339)}}}
		if managed {
			n.Labels = map[string]string{LabelManagedBy: fieldManager, LabelRun: name}
		}
		return n
	}
	labels := func(run string) map[string]string {
		l := map[string]string{LabelManagedBy: fieldManager}
		if run != "" {
			l[LabelRun] = run
		}
		return l
	}
	rule := func(name string, l map[string]string) *resourceapi.DeviceTaintRule {
		return &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	class := func(name string, l map[string]string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	client := fake.NewClientset(
		ns("dralab-killed", now.Add(-time.Minute), true),
		ns("dralab-running", now.Add(time.Minute), true),
		ns("team-a", now.Add(-time.Hour), false),
		rule("killed-gpu-0", labels("dralab-killed")),
		rule("running-gpu-1", labels("dralab-running")),
		rule("no-run", labels("")),
		rule("theirs", nil),
		class("killed-class", labels("dralab-killed")),
		class("gpu.dralab.dev", nil),
	)
	r := &Runner{Client: client}
	ctx := context.Background()
	removed, err := r.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"DeviceClass/killed-class", "DeviceTaintRule/killed-gpu-0", "Namespace/dralab-killed"}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	namespaces, _ := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	rules, _ := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	classes, _ := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if len(namespaces.Items) != 2 || len(rules.Items) != 3 || len(classes.Items) != 1 {
		t.Errorf("left %d namespaces, %d rules, %d classes; want the live run's, the unlabelled and another's: 2, 3, 1", len(namespaces.Items), len(rules.Items), len(classes.Items))
	}
	// No run alive: a rule a run made without saying which is left too.
	if err := client.CoreV1().Namespaces().Delete(ctx, "dralab-running", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	removed, err = r.Sweep(ctx)
	if err != nil || !slices.Equal(removed, []string{"DeviceTaintRule/no-run", "DeviceTaintRule/running-gpu-1"}) {
		t.Errorf("with no run alive: removed %v, %v; want the rules of runs that are gone", removed, err)
	}
}

// A claim of another namespace given a device between the check and the
// taint rule: the check once the rules are made finds it, removes the
// rules and fails the step naming the claim.
func TestTaintAllocatedUndoesARuleAnotherClaimMet(t *testing.T) {
	const ns = "dralab-device-taint-y"
	row := allocation.Row{Namespace: ns, Pod: "inference-a", Driver: gpu.DriverName, Pool: "n1", Device: "gpu-0"}
	tenant := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "training"}}
	tenant.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: gpu.DriverName, Pool: "n1", Device: "gpu-0", AdminAccess: ptr.To(true)}}}}
	made := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: ns + "-gpu-0-0"}}
	client := fake.NewClientset(made, tenant)
	r := &run{Runner: &Runner{Client: client}, ns: ns}
	ctx := context.Background()
	err := r.stillOnlyOurs(ctx, []allocation.Row{row}, []string{made.Name})
	if err == nil || !strings.Contains(err.Error(), "team/training") || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("a tenant's claim on the tainted device: %v; want a failure naming it and saying the rules are removed", err)
	}
	if rules, _ := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{}); len(rules.Items) != 0 {
		t.Errorf("%d rules left, want the step's removed", len(rules.Items))
	}
	if err := client.ResourceV1().ResourceClaims("team").Delete(ctx, "training", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.stillOnlyOurs(ctx, []allocation.Row{row}, nil); err != nil {
		t.Errorf("no other claim: %v", err)
	}
}
