package kit

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// endpoint serves handler on a loopback port, as the driver command does.
func endpoint(t *testing.T, handler http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := Serve(context.Background(), l, handler)
	t.Cleanup(stop)
	return "http://" + l.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// waitFor polls url until it answers code, for at most ten seconds; the
// failure names what it waited for and the last answer.
func waitFor(t *testing.T, url string, code int, what string) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got, body := get(t, url)
		if got == code {
			return body
		}
		last = body
	}
	t.Fatalf("%s: %s did not answer %d within 10s; last answer: %q", what, url, code, last)
	return ""
}

// /healthz answers 503 until the kubelet has registered the driver and its
// ResourceSlices are in the API, naming what is missing, then 200.
func TestHealthz(t *testing.T) {
	// The API refuses the node's slices until the test lets it.
	var refuse atomic.Bool
	refuse.Store(true)
	h := newHarness(t, 2, func(o *Options) {
		o.KubeClient.(*fake.Clientset).PrependReactor("create", "resourceslices",
			func(k8stesting.Action) (bool, runtime.Object, error) {
				if refuse.Load() {
					return true, nil, errors.New("refused by the test")
				}
				return false, nil, nil
			})
	})
	var health Health
	url := endpoint(t, &health) + "/healthz"
	if code, body := get(t, url); code != http.StatusServiceUnavailable || body != "starting\n" {
		t.Errorf("before the driver starts: %d %q, want 503 starting", code, body)
	}
	health.Watch(h.driver)
	if code, body := get(t, url); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered with the kubelet") {
		t.Errorf("before registration: %d %q, want 503 naming the registration", code, body)
	}
	h.register()
	body := waitFor(t, url, http.StatusServiceUnavailable, "registered, slices refused")
	if !strings.Contains(body, "ResourceSlices not published yet: 2 of 2 devices missing (gpu-0, gpu-1)") {
		t.Errorf("registered, slices refused: %q, want the missing devices named", body)
	}
	refuse.Store(false)
	if body := waitFor(t, url, http.StatusOK, "registered, slices published"); body != "ok\n" {
		t.Errorf("healthy body %q", body)
	}
}

// /metrics counts the kubelet's prepares and unprepares, their failures
// and durations, and the prepared claims.
func TestMetrics(t *testing.T) {
	h := newHarness(t, 2, func(o *Options) { o.Metrics = NewMetrics(testDriver) })
	url := endpoint(t, h.opts.Metrics.Handler()) + "/metrics"
	good, bad := h.claim("good", "gpu-0"), h.claim("bad", "gpu-7")
	h.prepare(good, bad)
	expect := func(when string, want ...string) {
		t.Helper()
		code, body := get(t, url)
		if code != http.StatusOK {
			t.Fatalf("%s: /metrics answered %d: %s", when, code, body)
		}
		for _, w := range want {
			if !strings.Contains(body, "\n"+w+"\n") {
				t.Errorf("%s: /metrics lacks the line %s", when, w)
			}
		}
	}
	const l = `driver="gpu.test.dev",operation=`
	expect("after a good and a bad prepare",
		`dralab_driver_prepared_claims{driver="gpu.test.dev"} 1`,
		`dralab_driver_claim_operations_total{`+l+`"prepare"} 2`,
		`dralab_driver_claim_operation_errors_total{`+l+`"prepare"} 1`,
		`dralab_driver_claim_operation_duration_seconds_count{`+l+`"prepare"} 2`,
		`dralab_driver_claim_operations_total{`+l+`"unprepare"} 0`,
	)
	h.unprepare(good)
	expect("after an unprepare",
		`dralab_driver_prepared_claims{driver="gpu.test.dev"} 0`,
		`dralab_driver_claim_operations_total{`+l+`"unprepare"} 1`,
		`dralab_driver_claim_operation_errors_total{`+l+`"unprepare"} 0`,
		`dralab_driver_devices{driver="gpu.test.dev",health="healthy"} 2`,
	)
	// A device whose health the monitor cannot tell is Unknown to the
	// kubelet and in the metrics, not Unhealthy.
	if err := h.driver.SetDeviceHealth(context.Background(), map[string]DeviceFault{"gpu-1": {Message: "not watched", Unknown: true}}); err != nil {
		t.Fatal(err)
	}
	expect("after gpu-1's health is unknown",
		`dralab_driver_devices{driver="gpu.test.dev",health="healthy"} 1`,
		`dralab_driver_devices{driver="gpu.test.dev",health="unhealthy"} 0`,
		`dralab_driver_devices{driver="gpu.test.dev",health="unknown"} 1`,
	)
	report, _ := h.driver.healthReport()
	for _, dh := range report.Devices {
		if want := map[string]kubeletplugin.HealthStatus{"gpu-0": kubeletplugin.HealthStatusHealthy, "gpu-1": kubeletplugin.HealthStatusUnknown}[dh.DeviceName]; dh.Health != want {
			t.Errorf("the kubelet hears %s is %s, want %s", dh.DeviceName, dh.Health, want)
		}
	}
}
