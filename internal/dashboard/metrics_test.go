package dashboard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
	"github.com/dralab/dralab/internal/drametrics"
)

// growing is a cluster whose node gpu-h100 has prepared n claims at the
// n-th read of its metrics, and one node, gpu-l4, whose kubelet cannot be
// read.
func growing() (func(context.Context) (*drametrics.Snapshot, error), *atomic.Int64) {
	var reads atomic.Int64
	return func(context.Context) (*drametrics.Snapshot, error) {
		n := float64(reads.Add(1))
		return &drametrics.Snapshot{
			Nodes: []drametrics.Node{
				{Name: "gpu-h100",
					Kubelet: drametrics.Kubelet{Prepare: drametrics.Timing{Count: uint64(n), Sum: n * 0.002}, ClaimsInUse: map[string]float64{drametrics.AnyDriver: n, "gpu.dralab.dev": n}},
					Drivers: map[string]drametrics.Driver{"gpu.dralab.dev": {Prepares: n, Prepared: n}}},
				{Name: "gpu-l4", KubeletErr: errors.New("reading node gpu-l4's kubelet /metrics: no route"), Drivers: map[string]drametrics.Driver{}},
			},
			Scheduler: drametrics.Scheduler{Evaluations: map[string]float64{"PreFilter": 3 * n}},
		}, nil
	}, &reads
}

// metricsServer serves the dashboard of a fake cluster, with a metrics
// source if metrics is not nil.
func metricsServer(t *testing.T, client *fake.Clientset, metrics func(context.Context) (*drametrics.Snapshot, error)) *httptest.Server {
	s := &dashboard.Server{Client: client, Title: "dralab: test", Token: "s3cret", Debounce: 10 * time.Millisecond, Metrics: metrics}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Watch(ctx)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// The panel's fragment: a row per node with the kubelet's and the
// drivers' figures, an unreadable kubelet said as such, the scheduler's
// line; behind the token like the rest; absent without a metrics source.
func TestMetricsPanel(t *testing.T) {
	metrics, _ := growing()
	srv := metricsServer(t, fake.NewClientset(cluster()...), metrics)
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("/metrics-panel?token=s3cret")
	for _, want := range []string{
		`<tr data-node="gpu-h100" data-prepares="1" data-claims-in-use="1">`,
		`<td>1, mean 2.0ms</td>`,
		`1 (gpu.dralab.dev 1)`,
		`data-driver="gpu.dralab.dev" data-prepares="1"`,
		`no route`,
		`PreFilter 3`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the panel (%d) lacks %q:\n%s", code, want, body)
		}
	}
	if code, body := get("/metrics-panel"); code != http.StatusUnauthorized || strings.Contains(body, "gpu-h100") {
		t.Errorf("without the token: %d %q", code, body)
	}
	if _, page := get("/?token=s3cret"); !strings.Contains(page, `id="metrics-panel"`) {
		t.Error("the page has no metrics panel")
	}
	plain := newServer(t, fake.NewClientset(cluster()...))
	resp, err := http.Get(plain.URL + "/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(page), `id="metrics-panel"`) {
		t.Error("a dashboard without metrics shows a metrics panel")
	}
}

// In a real browser the panel fills in after the page loads, and its
// figures move when the cluster changes, without a reload.
func TestDashboardMetricsInABrowser(t *testing.T) {
	b := browsertest.New(t)
	client := fake.NewClientset(cluster()...)
	metrics, reads := growing()
	srv := metricsServer(t, client, metrics)
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?token=s3cret")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	const row = `#metrics-panel tr[data-node="gpu-h100"]`
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(row)); err != nil {
		t.Fatalf("waiting for the panel: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live").textContent === "Live."`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("waiting for the page to go live: %v", err)
	}
	first, err := chromedp.Run(ctx, chromedp.AttributeValue(row, "data-prepares"))
	if err != nil {
		t.Fatal(err)
	}
	before := reads.Load()
	if err := client.CoreV1().Pods("work").Delete(context.Background(), "late-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	moved, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('`+row+`').dataset.prepares !== "`+first.Value+`"`, chromedp.WithPollingTimeout(4*time.Second)))
	if err != nil || !moved {
		t.Fatalf("the panel's prepares stayed %s after the cluster changed (%v); %d reads before, %d after", first.Value, err, before, reads.Load())
	}
	text, err := chromedp.Run(ctx, chromedp.Text(`#metrics-panel tr[data-node="gpu-l4"] .error`))
	if err != nil || !strings.Contains(text, "no route") {
		t.Errorf("the unreadable kubelet reads %q (%v)", text, err)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}
