package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/lab"
)

// dumpDiagnostics writes what explains a failure (pods, events, claims,
// slices, classes, and the logs of l, drivers' included: the lab the test
// ran on, nil for a cluster the suite did not start) to $ARTIFACTS/<test>/,
// or to a temporary directory it names in the test log.
func dumpDiagnostics(ctx context.Context, t *testing.T, l *lab.Lab, client kubernetes.Interface, namespace string) {
	t.Helper()
	var b strings.Builder
	add := func(title string, obj any, err error) {
		if err != nil {
			fmt.Fprintf(&b, "### %s: %v\n", title, err)
			return
		}
		data, _ := yaml.Marshal(obj)
		fmt.Fprintf(&b, "### %s\n%s\n", title, data)
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	add("pods", pods, err)
	events, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "event: %s %s/%s %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	claims, err := client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	add("resourceclaims", claims, err)
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	add("resourceslices", slices, err)
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	add("deviceclasses", classes, err)

	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "dralab-e2e-diagnostics-"); err != nil {
			t.Logf("diagnostics:\n%s", b.String())
			return
		}
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(b.String()), 0o644)
		if l != nil {
			_ = l.CollectLogs(ctx, filepath.Join(dir, "lab-logs"))
		}
		t.Logf("diagnostics written to %s", dir)
	}
}
