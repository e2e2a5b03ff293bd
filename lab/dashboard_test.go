package lab_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
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

	// The metrics panel before any claim is prepared: every node's row.
	panelURL := strings.Replace(url, "/?token=", "/metrics-panel?token=", 1)
	before := metricsPanel(t, panelURL)

	const ns = "default"
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "h100", gpu.Tiers[0].ClassName(), "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, scratchlab.ClaimPod(ns, "dashboard-probe", "h100"), metav1.CreateOptions{}); err != nil {
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

	checkDashboardDOM(ctx, t, chromium, url, client)
	probe, err := client.CoreV1().Pods(ns).Get(ctx, "dashboard-probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkMetricsPanel(t, url, probe.Spec.NodeName, before)
	// The dashboard lab:dashboard serves itself where the lab's backend
	// serves none (kind): the same page, from this process.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	own, err := l.ServeDashboard(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if own == url || !strings.HasPrefix(own, "http://127.0.0.1:") {
		t.Errorf("ServeDashboard's URL %q, want a new loopback URL beside the lab's %q", own, url)
	}
	checkDashboardDOM(ctx, t, chromium, own, client)

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

// metricsPanel reads the dashboard's metrics panel and returns its rows'
// data-prepares by node: what the kubelets count of NodePrepareResources.
func metricsPanel(t *testing.T, panelURL string) map[string]string {
	t.Helper()
	resp, err := http.Get(panelURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the metrics panel: %s %q", resp.Status, body)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr data-node="([^"]+)" data-prepares="([0-9]+)"`).FindAllStringSubmatch(string(body), -1) {
		out[m[1]] = m[2]
	}
	return out
}

// checkMetricsPanel opens the dashboard in Chromium and waits for its
// metrics panel to count, on the node of a pod that claimed a GPU, more
// prepares by the kubelet than before, and at least one by the GPU
// driver: the figures of lab:metrics, live on the page.
func checkMetricsPanel(t *testing.T, url, node string, before map[string]string) {
	t.Helper()
	if _, ok := before[node]; !ok {
		t.Fatalf("the metrics panel had no row for node %s before the pod: %v", node, before)
	}
	b := browsertest.New(t)
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	row := `#metrics-panel tr[data-node="` + node + `"]`
	moved := `(function () { var r = document.querySelector('` + row + `'); var d = r && r.querySelector('[data-driver="` + gpu.DriverName + `"][data-prepares]');
	  return !!r && Number(r.dataset.prepares) > ` + before[node] + ` && !!d && Number(d.dataset.prepares) >= 1; })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](moved, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("metrics-panel") || {}).innerHTML || "no panel"`))
		t.Fatalf("the metrics panel never counted the pod's prepare on %s (before: %s): %v\n%s", node, before[node], err, html)
	}
	t.Logf("the metrics panel counts the pod's prepare on %s (before: %s)", node, before[node])
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}

// checkDashboardDOM opens a dashboard in Chromium (--dump-dom) and checks
// that it names every device of the cluster's slices and the pod holding
// a claim.
func checkDashboardDOM(ctx context.Context, t *testing.T, chromium, url string, client kubernetes.Interface) {
	t.Helper()
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
}

// BenchmarkDashboard measures what the dashboard costs on the default lab:
// the page's weight and its time to first render in Chromium, and the lab
// process's (control plane and dashboard server) CPU seconds and peak RSS
// during a wave of 100 pods whose claims ask for an H100, else an A100,
// else an L4 (8 run, 92 wait; then all are deleted), without the page open
// and with it open and live. A first wave warms the lab up unmeasured.
//
//	go test ./lab -run '^$' -bench Dashboard -benchtime 1x
func BenchmarkDashboard(b *testing.B) {
	ctx := context.Background()
	l, _, client := upLab(ctx, b, stateRoot(b), binary(b), exampleConfig(b, "default.yaml", "b-dashboard"))
	url, err := l.DashboardURL()
	if err != nil {
		b.Fatal(err)
	}
	st, err := l.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ls, err := labstate.Dir(st.StateDir).ReadStatus()
	if err != nil {
		b.Fatal(err)
	}
	wave := func(name string) (cpu, peakMiB float64) {
		b.Helper()
		return podWave(ctx, b, client, ls.PID, name, 100)
	}
	wave("warm-up")
	var closedCPU, closedRSS, openCPU, openRSS, pageBytes, firstPaint float64
	b.ResetTimer()
	for i := range b.N {
		cpu, rss := wave(fmt.Sprintf("closed-%d", i))
		closedCPU, closedRSS = closedCPU+cpu, closedRSS+rss

		b.StopTimer()
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pageBytes += float64(len(page))
		br := browsertest.New(b)
		if err := chromedp.Do(br.Ctx, chromedp.Navigate(url), chromedp.WaitVisible(`li.device`)); err != nil {
			b.Fatal(err)
		}
		// Chromium records the paint a moment after it happens.
		fcp, err := chromedp.Run(br.Ctx, chromedp.Poll[float64](`(performance.getEntriesByName("first-contentful-paint")[0] || {}).startTime`, chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil {
			b.Fatalf("reading the first paint: %v", err)
		}
		firstPaint += fcp
		if _, err := chromedp.Run(br.Ctx, chromedp.Poll[bool](`document.getElementById("live").textContent === "Live."`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			b.Fatalf("the page did not go live: %v", err)
		}
		b.StartTimer()
		cpu, rss = wave(fmt.Sprintf("open-%d", i))
		openCPU, openRSS = openCPU+cpu, openRSS+rss
		if p := br.Problems(); len(p) > 0 {
			b.Errorf("the page's console: %v", p)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(pageBytes/n, "page-bytes")
	b.ReportMetric(firstPaint/n, "ms-first-paint")
	b.ReportMetric(closedCPU/n, "cpu-s-closed")
	b.ReportMetric(openCPU/n, "cpu-s-open")
	b.ReportMetric((openCPU-closedCPU)/n, "cpu-s-extra")
	b.ReportMetric(closedRSS/n, "MiB-peak-rss-closed")
	b.ReportMetric(openRSS/n, "MiB-peak-rss-open")
	b.ReportMetric((openRSS-closedRSS)/n, "MiB-rss-extra")
}

// podWave creates, in a namespace of its own, a prioritized-list claim
// template and n pods using it, waits until each runs or is found
// unschedulable, deletes the namespace and waits until it is gone. It
// returns the CPU seconds the process pid spent meanwhile and its peak
// RSS, sampled every 100 ms.
func podWave(ctx context.Context, b *testing.B, client kubernetes.Interface, pid int, name string, n int) (cpuSeconds, peakMiB float64) {
	b.Helper()
	ns := "wave-" + name
	stop := make(chan struct{})
	peak := make(chan float64)
	go func() {
		top := 0.0
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := memoryOf(b, pid).rss; r > top {
				top = r
			}
			select {
			case <-stop:
				peak <- top
				return
			case <-tick.C:
			}
		}
	}()
	before := cpuTicks(b, pid)
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	tmpl := scratchlab.ClaimTemplate(ns, "fallback", "", "", "")
	req := &tmpl.Spec.Spec.Devices.Requests[0]
	req.Exactly = nil
	for _, t := range gpu.Tiers {
		req.FirstAvailable = append(req.FirstAvailable, resourceapi.DeviceSubRequest{Name: t.Name, DeviceClassName: t.ClassName()})
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, scratchlab.ClaimPod(ns, fmt.Sprintf("pod-%d", i), "fallback"), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		settled := 0
		for _, p := range pods.Items {
			if p.Status.Phase == v1.PodRunning || allocation.Unschedulable(&p) {
				settled++
			}
		}
		if settled == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d pods running or unschedulable after 5 minutes", ns, settled, n)
		}
	}
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("namespace %s not gone after 5 minutes: %v", ns, err)
		}
	}
	cpu := float64(cpuTicks(b, pid)-before) / clockTicks
	close(stop)
	return cpu, <-peak
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on Linux.
const clockTicks = 100

// cpuTicks is the user and system time a process has spent, in ticks.
func cpuTicks(tb testing.TB, pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from after its closing one (state is field 3, utime 14).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("parsing /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return utime + stime
}
