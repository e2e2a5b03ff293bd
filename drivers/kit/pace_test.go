package kit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestPaceSliceWrites: a client's ResourceSlice writes reach the server
// at least the interval apart, whatever their kind; a write waiting its
// turn gives up with its context.
func TestPaceSliceWrites(t *testing.T) {
	const interval = 200 * time.Millisecond
	var (
		mu     sync.Mutex
		writes []time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isSliceWrite(r) {
			mu.Lock()
			writes = append(writes, time.Now())
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"s"}}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(PaceSliceWrites(interval))
	client := kubernetes.NewForConfigOrDie(cfg)
	slices := client.ResourceV1().ResourceSlices()
	ctx := context.Background()
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := slices.Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]time.Time(nil), writes...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("the server saw %d slice writes, want 3", len(got))
	}
	// The pacer lets a write go interval after the one before went; the
	// arrivals may differ from the sendings by the transport's jitter.
	const jitter = 50 * time.Millisecond
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(got[i-1]); gap < interval-jitter {
			t.Errorf("slice writes %d and %d reached the server %v apart, want at least %v", i-1, i, gap, interval)
		}
	}

	// The next write must wait a whole interval: its context ends first.
	short, cancel := context.WithTimeout(ctx, interval/4)
	defer cancel()
	if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := slices.Create(short, slice, metav1.CreateOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a write whose context ends while it waits: %v, want %v", err, context.DeadlineExceeded)
	}
}

// TestIsSliceWrite: only writes of ResourceSlices are paced; reads and
// other resources' writes are not.
func TestIsSliceWrite(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodPost, "/apis/resource.k8s.io/v1/resourceslices", true},
		{http.MethodPut, "/apis/resource.k8s.io/v1/resourceslices/s", true},
		{http.MethodPatch, "/apis/resource.k8s.io/v1beta2/resourceslices/s", true},
		{http.MethodDelete, "/apis/resource.k8s.io/v1/resourceslices/s", true},
		{http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices", false},
		{http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices/s", false},
		{http.MethodPut, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status", false},
		{http.MethodPost, "/api/v1/namespaces/ns/events", false},
		{http.MethodPost, "/apis/other.example.com/v1/resourceslices", false},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if got := isSliceWrite(req); got != c.want {
			t.Errorf("%s %s: paced %v, want %v", c.method, c.path, got, c.want)
		}
	}
}
