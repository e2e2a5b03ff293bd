package lab_test

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/testlab"
)

// TestDashboardOnLab opens the lab process's dashboard in Chromium
// (--dump-dom, as a user would check it): the page names every device of
// the lab's ResourceSlices and the pod that holds a claim; without its
// token the server answers 401 and nothing of the cluster.
func TestDashboardOnLab(t *testing.T) {
	chromium, err := exec.LookPath(dashboard.Chromium)
	if err != nil {
		t.Fatalf("Chromium is not installed (%v): go run mage.go deps:browser installs Debian's", err)
	}
	ctx := context.Background()
	l, _, client := upLab(ctx, t, stateRoot(t), binary(t), exampleConfig(t, "default.yaml", "t-dashboard"))
	url, err := l.DashboardURL()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.Contains(url, "?token=") {
		t.Fatalf("dashboard URL %q, want a loopback URL with a token", url)
	}

	const ns = "default"
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, testlab.ClaimTemplate(ns, "h100", gpu.Tiers[0].ClassName(), "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, testlab.ClaimPod(ns, "dashboard-probe", "h100"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "dashboard-probe", metav1.GetOptions{})
		if err == nil && p.Status.Phase == v1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod dashboard-probe is not Running: %v", err)
		}
	}

	start := time.Now()
	dom, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	t.Logf("chromium --dump-dom: %d bytes in %v", len(dom), time.Since(start).Round(time.Millisecond))
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devices := 0
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			devices++
			ref := s.Spec.Driver + "/" + s.Spec.Pool.Name + "/" + d.Name
			if !strings.Contains(string(dom), `data-device="`+ref+`"`) {
				t.Errorf("the page lacks device %s", ref)
			}
		}
	}
	if !strings.Contains(string(dom), `data-pods="default/dashboard-probe"`) {
		t.Errorf("the page does not name pod default/dashboard-probe as a claim's holder")
	}
	t.Logf("the page shows the %d devices of the lab's slices", devices)

	resp, err := http.Get(strings.Split(url, "?")[0])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "gpu-") {
		t.Errorf("without the token: %d %q, want 401 and no data", resp.StatusCode, body)
	}
}
