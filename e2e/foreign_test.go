package e2e

import (
	"context"
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/internal/kubeapply"
	"github.com/dralab/dralab/scenarios"
)

// TestScenarioLeavesForeignClusterObjects: a scenario's cluster-scoped
// object whose name is already taken by someone else's (here the
// extended-resource scenario's DeviceClass) is neither applied over nor
// deleted: the run fails naming it, and the class is as it was.
func TestScenarioLeavesForeignClusterObjects(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	s, err := scenarios.Get("extended-resource")
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(testenv.EnvConf().Client().RESTConfig())
	const name = "counted-a100.gpu.dralab.dev"
	theirs := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "ml-platform"}},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "example.com"`}}}},
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the test's class: %v", err)
		}
	})

	runner, err := scenarios.NewRunner(testenv.EnvConf().Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, err = runner.Run(ctx, s)
	if errors.Is(err, scenarios.ErrUnmet) && theLab == nil {
		t.Skipf("skipped on this cluster, which the user chose: %v", err)
	}
	if !errors.Is(err, kubeapply.ErrNotOwned) {
		t.Fatalf("running %s over someone's DeviceClass %s: %v; want it refused (kubeapply.ErrNotOwned)", s.Name, name, err)
	}
	got, err := client.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the class the scenario found is gone: %v", err)
	}
	if got.Spec.ExtendedResourceName != nil || len(got.Spec.Selectors) != 1 || got.Labels[scenarios.LabelManagedBy] != "" || got.Labels["team"] != "ml-platform" {
		t.Errorf("the scenario changed someone's class: %+v", got)
	}
	t.Logf("refused as it should be: %v", err)
}
