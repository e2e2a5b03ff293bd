package hollownode

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A node's requests wait until the API server answers for the node's own
// Node (404 before it registers), arrive then, and pass at once after that;
// an API server that never answers gets the requests after the gate's
// limit, as it would without the gate.
func TestReadyGateHoldsRequestsUntilTheAPIServerServesTheNode(t *testing.T) {
	var ready atomic.Bool
	var probes, requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/n1" && !ready.Load() {
			probes.Add(1)
			// An API server that listens but does not yet serve.
			http.Error(w, "the server is currently unable to handle the request", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/n1" && probes.Load() > 0 && requests.Load() == 0 {
			probes.Add(1)
			http.Error(w, `nodes "n1" not found`, http.StatusNotFound)
			return
		}
		requests.Add(1)
		if !ready.Load() {
			t.Errorf("%s %s reached the API server before it was ready", r.Method, r.URL.Path)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	gate := newReadyGate(http.DefaultTransport, srv.URL, "n1")
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
		t.Errorf("the gate asked %d times; want it to have asked until the API server served the node", asked)
	}
	for range 3 {
		resp, err := client.Get(srv.URL + "/api/v1/nodes/n1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if probes.Load() != asked {
		t.Errorf("the gate asked again once open: %d times, then %d", asked, probes.Load())
	}
	if requests.Load() != 4 {
		t.Errorf("%d requests reached the server, want 4", requests.Load())
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An API server that refuses the node: the gate stays shut.
		w.WriteHeader(http.StatusForbidden)
	}))
	defer never.Close()
	limited := newReadyGate(http.DefaultTransport, never.URL, "n1")
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
