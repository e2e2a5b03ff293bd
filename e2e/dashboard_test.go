package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/scenarios"
)

// TestDashboardDuringFallback opens the live dashboard in Chromium while
// the prioritized-fallback scenario runs. Once the cluster is full it
// asserts a tile per published device, the allocated tiles exactly the
// allocated devices with their pods, and the pending pod's reason; when
// the scenario deletes a pod, the page drops it within a second. The
// console has no error; a screenshot of the full cluster goes to
// $ARTIFACTS. The page is the
// lab process's dashboard, or, on a cluster whose lab serves none, one
// this test serves as lab:dashboard does.
func TestDashboardDuringFallback(t *testing.T) {
	requireCluster(t)
	f := features.New("dashboard").WithLabel("tier", "fast").
		Assess("the page follows prioritized-fallback", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			dashboardDuringFallback(ctx, t, cfg)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func dashboardDuringFallback(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	s, err := scenarios.Get("prioritized-fallback")
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	url := ""
	if theLab != nil {
		url, err = theLab.DashboardURL()
	}
	if theLab == nil || errors.Is(err, lab.ErrNoDashboard) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		url, err = dashboard.Serve(sctx, cfg.KubeconfigFile(), "dralab e2e", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := browsertest.New(t)
	bctx := b.Ctx
	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(`li.device`)); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("live").textContent === "Live."`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the page did not go live: %v", err)
	}

	runner, err := scenarios.NewRunner(cfg.Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	type deletion struct {
		pod   string
		after time.Duration
		err   error
	}
	deleted := make(chan deletion, 1)
	checked := false
	runner.OnStep = func(step string, rows []allocation.Row) {
		if step != s.Steps[1].Name {
			return
		}
		checked = true
		checkFullCluster(ctx, t, b, client, rows)
		// The next step deletes a pod that holds an H100: measure from the
		// pod leaving the API to the page dropping it.
		ns := rows[0].Namespace
		w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("watching the scenario's pods: %v", err)
			close(deleted)
			return
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type != watch.Deleted {
					continue
				}
				gone := time.Now()
				pod := ns + "/" + ev.Object.(*v1.Pod).Name
				_, err := chromedp.Run(bctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('[data-pods~="%[1]s"], [data-pod="%[1]s"]') === null`, pod),
					chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
				deleted <- deletion{pod: pod, after: time.Since(gone), err: err}
				return
			}
		}()
	}
	res, err := runner.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures() {
		t.Errorf("%s: %s", s.Source("scenario.yaml"), f)
	}
	if !checked {
		t.Fatalf("the scenario never reached step %q", s.Steps[1].Name)
	}
	select {
	case d, ok := <-deleted:
		switch {
		case !ok:
		case d.err != nil:
			t.Errorf("the page still shows the deleted pod %s: %v", d.pod, d.err)
		case d.after > time.Second:
			t.Errorf("the page dropped the deleted pod %s %v after it left the API, want within a second", d.pod, d.after)
		default:
			t.Logf("the page dropped the deleted pod %s %v after it left the API", d.pod, d.after.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Errorf("no pod of the scenario was deleted from the API")
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}

// checkFullCluster compares the page, once it caught up, with the cluster
// and the scenario's allocation table.
func checkFullCluster(ctx context.Context, t *testing.T, b *browsertest.Browser, client kubernetes.Interface, rows []allocation.Row) {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var published []string
	for _, sl := range list.Items {
		for _, d := range sl.Spec.Devices {
			if _, mig := d.Attributes[gpu.AttrParentUUID]; !mig {
				published = append(published, sl.Spec.Driver+"/"+sl.Spec.Pool.Name+"/"+d.Name)
			}
		}
	}
	// Allocated devices and their pods, and the pending pod, from the
	// scenario's table; the lab runs nothing else.
	var allocated, holders []string
	pending := ""
	for _, r := range rows {
		switch {
		case r.Device != "":
			allocated = append(allocated, r.DeviceRef())
			holders = append(holders, r.DeviceRef()+"="+r.Namespace+"/"+r.Pod)
		case r.Node == "":
			pending = r.Namespace + "/" + r.Pod
		}
	}
	slices.Sort(published)
	slices.Sort(allocated)
	slices.Sort(holders)
	if pending == "" {
		t.Fatalf("the full cluster has no pending pod:\n%s", allocation.Table(rows))
	}
	// The page follows within a second; allow five before calling it wrong.
	const pageState = `JSON.stringify({
  tiles: Array.from(document.querySelectorAll("li.device")).map(e => e.dataset.device).sort(),
  allocated: Array.from(document.querySelectorAll("li.device")).filter(e => e.dataset.state.split(" ").includes("allocated")).map(e => e.dataset.device).sort(),
  holders: Array.from(document.querySelectorAll("li.device li.holder")).map(e => e.closest("li.device").dataset.device + "=" + e.dataset.pods).sort(),
  pending: Array.from(document.querySelectorAll(".pending li")).map(e => e.dataset.pod + ": " + e.querySelector(".reason").textContent)
})`
	want := fmt.Sprintf(`{"tiles":%s,"allocated":%s,"holders":%s`, jsonList(published), jsonList(allocated), jsonList(holders))
	var got string
	start := time.Now()
	for {
		got, err = chromedp.Run(b.Ctx, chromedp.Evaluate[string](pageState))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if strings.HasPrefix(got, want) && strings.Contains(got, pending+": ") {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the page shows\n%s\nwant (from the cluster)\n%s,\"pending\":[%q...]}", got, want, pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the page shows the %d devices, the %d allocated with their pods, and %s pending (caught up in %v)", len(published), len(allocated), pending, time.Since(start).Round(time.Millisecond))
	reason, err := chromedp.Run(b.Ctx, chromedp.Text(fmt.Sprintf(`.pending li[data-pod=%q] .reason`, pending)))
	if err != nil || strings.TrimSpace(reason) == "" {
		t.Errorf("the pending pod %s shows no reason (%v)", pending, err)
	} else {
		t.Logf("pending reason on the page: %s", reason)
	}
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		if shot, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100)); err != nil {
			t.Errorf("screenshot: %v", err)
		} else if err := os.WriteFile(filepath.Join(dir, "dashboard-prioritized-fallback.png"), shot, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func jsonList(items []string) string {
	if len(items) == 0 {
		return "[]"
	}
	var q []string
	for _, s := range items {
		q = append(q, fmt.Sprintf("%q", s))
	}
	return "[" + strings.Join(q, ",") + "]"
}
