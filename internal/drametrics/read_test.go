package drametrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestSchedulerMetricsWhereTheSchedulerServesThem: a scheduler that runs as
// a pod (kubeadm's, on kind's nodes) is read through the API server's proxy
// to the pod, each running one's metrics added up, never the API server's
// own /metrics (which has none of the scheduler's: zeros); without such a
// pod (the embedded lab's scheduler, in the API server's process), the
// control plane's /metrics.
func TestSchedulerMetricsWhereTheSchedulerServesThem(t *testing.T) {
	var (
		mu   sync.Mutex
		pods string
		read []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		read = append(read, r.URL.Path)
		list := pods
		mu.Unlock()
		switch {
		case r.URL.Path == "/api/v1/namespaces/kube-system/pods":
			if r.URL.Query().Get("labelSelector") != "component=kube-scheduler" {
				http.Error(w, "unexpected selector", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[` + list + `]}`))
		case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/kube-system/pods/https:kube-scheduler-") && strings.HasSuffix(r.URL.Path, ":10259/proxy/metrics"):
			_, _ = w.Write([]byte(scheduler))
		case r.URL.Path == "/metrics":
			// The API server's own: the embedded lab's scheduler
			// registers here.
			_, _ = w.Write([]byte(scheduler))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
	ctx := context.Background()

	pod := func(name, phase string) string {
		return `{"metadata":{"name":"` + name + `","namespace":"kube-system"},"status":{"phase":"` + phase + `"}}`
	}
	mu.Lock()
	pods = pod("kube-scheduler-cp1", "Running") + "," + pod("kube-scheduler-cp2", "Running") + "," + pod("kube-scheduler-cp3", "Pending")
	mu.Unlock()
	s, err := readScheduler(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if s.Evaluations["Filter"] != 20 || s.Evaluations["PreFilter"] != 10 || s.Durations["PreFilter"] != (Timing{Count: 2, Sum: 0.004}) {
		t.Errorf("two schedulers' metrics added up: %+v", s)
	}
	mu.Lock()
	got := strings.Join(read, " ")
	read = nil
	pods = ""
	mu.Unlock()
	if strings.Contains(got, " /metrics") || strings.Contains(got, "cp3") || !strings.Contains(got, "https:kube-scheduler-cp1:10259/proxy/metrics") {
		t.Errorf("with scheduler pods, read %s; want each running pod's, through the proxy, and not the API server's /metrics", got)
	}

	s, err = readScheduler(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if s.Evaluations["Filter"] != 10 {
		t.Errorf("without a scheduler pod, from the control plane's /metrics: %+v", s)
	}
}
