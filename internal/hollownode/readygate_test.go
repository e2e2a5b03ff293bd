package hollownode

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A node's requests wait for the API server's /readyz, arrive once it
// answers 200, and pass at once after that; an API server that never
// becomes ready gets the requests after the gate's limit, as it would
// without the gate.
func TestReadyGateHoldsRequestsUntilTheAPIServerIsReady(t *testing.T) {
	var ready atomic.Bool
	var probes, requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			probes.Add(1)
			if !ready.Load() {
				http.Error(w, "poststarthook/rbac/bootstrap-roles failed", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		requests.Add(1)
		if !ready.Load() {
			t.Errorf("%s %s reached the API server before it was ready", r.Method, r.URL.Path)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	gate := newReadyGate(http.DefaultTransport, srv.URL)
	gate.poll = 10 * time.Millisecond
	client := &http.Client{Transport: gate}
	go func() {
		time.Sleep(200 * time.Millisecond)
		ready.Store(true)
	}()
	resp, err := client.Post(srv.URL+"/api/v1/nodes", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("status %d, want 201", resp.StatusCode)
	}
	asked := probes.Load()
	if asked < 2 {
		t.Errorf("the gate asked /readyz %d times; want it to have asked until ready", asked)
	}
	for range 3 {
		resp, err := client.Get(srv.URL + "/api/v1/nodes/n1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if probes.Load() != asked {
		t.Errorf("the gate asked /readyz again once open: %d times, then %d", asked, probes.Load())
	}
	if requests.Load() != 4 {
		t.Errorf("%d requests reached the server, want 4", requests.Load())
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer never.Close()
	limited := newReadyGate(http.DefaultTransport, never.URL)
	limited.poll, limited.limit = 10*time.Millisecond, 100*time.Millisecond
	start := time.Now()
	resp, err = (&http.Client{Transport: limited}).Get(never.URL + "/api/v1/nodes/n1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || time.Since(start) < 100*time.Millisecond {
		t.Errorf("past its limit the gate let the request through after %s with %d; want after 100ms, the server's 403", time.Since(start), resp.StatusCode)
	}
}
