package dashboard_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/internal/dashboard/browsertest"
)

// The page in a real browser: a tile per published device, the allocated
// one naming its pod, the pending pod with its reason, and a deleted pod
// gone from the page within a second, without a reload and without a
// console error. A screenshot goes to $ARTIFACTS.
func TestDashboardInABrowser(t *testing.T) {
	b := browsertest.New(t)
	ctx, problems := b.Ctx, b.Problems
	client := fake.NewClientset(cluster()...)
	srv := newServer(t, client)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	run := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?token=s3cret"))
	run("opening the page", err)
	_, err = chromedp.Run(ctx, chromedp.WaitVisible(`li.device`))
	run("waiting for the tiles", err)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live").textContent === "Live."`, chromedp.WithPollingTimeout(10*time.Second)))
	run("waiting for the page to go live", err)
	tiles, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("li.device").length`))
	run("counting tiles", err)
	allocated, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("li.device")).filter(e => e.dataset.state.split(" ").includes("allocated")).map(e => e.dataset.device).join(",")`))
	run("reading the allocated tiles", err)
	holder, err := chromedp.Run(ctx, chromedp.AttributeValue(`li.device[data-device="gpu.dralab.dev/gpu-h100/gpu-1"] li.holder`, "data-pods"))
	run("reading the holder", err)
	holderPods := holder.Value
	// The tile names the alternative of the prioritized list the claim got.
	chosen, err := chromedp.Run(ctx, chromedp.Text(`li.device[data-device="gpu.dralab.dev/gpu-h100/gpu-1"] li.holder .chosen`))
	run("reading the chosen subrequest", err)
	if chosen != "as gpu/h100" {
		t.Errorf("the holder of gpu-h100/gpu-1 shows %q, want the subrequest it got: as gpu/h100", chosen)
	}
	reason, err := chromedp.Run(ctx, chromedp.Text(`.pending li[data-pod="work/late-0"] .reason`))
	run("reading the pending reason", err)
	if tiles != 4 {
		t.Errorf("%d device tiles, want 4: one per published device", tiles)
	}
	if allocated != "gpu.dralab.dev/gpu-h100/gpu-1" || holderPods != "work/train-0" {
		t.Errorf("allocated tiles %q held by %q, want gpu-h100/gpu-1 held by work/train-0", allocated, holderPods)
	}
	if !strings.Contains(reason, "cannot allocate all claims") && !strings.Contains(reason, "claim") {
		t.Errorf("the pending pod's reason %q says nothing of its claim", reason)
	}

	// Live: a deleted pod leaves the page within a second.
	start := time.Now()
	if err := client.CoreV1().Pods("work").Delete(context.Background(), "late-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('.pending li[data-pod="work/late-0"]') === null`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the deleted pod is still on the page after 5 s: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the page took %v to drop the deleted pod, want within a second", d)
	} else {
		t.Logf("the page dropped the deleted pod %v after its deletion", d.Round(time.Millisecond))
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	run("taking a screenshot", err)
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "dashboard.png"), shot, 0o644); err != nil {
			t.Error(err)
		}
	}
	if p := problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}
