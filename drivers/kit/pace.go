package kit

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// slicePacer sends a client's ResourceSlice writes (create, update,
// patch, delete) at least interval apart, as where the API server
// throttles a driver that writes many slices: the first
// write goes at once, each next one once interval has passed since the
// one before. While a pool of several slices moves to a new generation,
// it is incomplete for as long as its writes take, where the allocator
// takes nothing from it. Other requests are not held.
type slicePacer struct {
	next     http.RoundTripper
	interval time.Duration

	mu   sync.Mutex
	last time.Time
}

// PaceSliceWrites wraps a client's transport so that its ResourceSlice
// writes go at least interval apart (rest.Config.Wrap takes it).
func PaceSliceWrites(interval time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return &slicePacer{next: next, interval: interval}
	}
}

func (p *slicePacer) RoundTrip(req *http.Request) (*http.Response, error) {
	if isSliceWrite(req) {
		if err := p.wait(req); err != nil {
			return nil, err
		}
	}
	return p.next.RoundTrip(req)
}

// wait holds a write until interval has passed since the last one; writes
// wait their turn one at a time.
func (p *slicePacer) wait(req *http.Request) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := time.Until(p.last.Add(p.interval)); !p.last.IsZero() && d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			return fmt.Errorf("waiting %v to write a ResourceSlice (--slice-write-interval %v): %w", d, p.interval, req.Context().Err())
		}
	}
	p.last = time.Now()
	return nil
}

// isSliceWrite tells a write of resource.k8s.io's ResourceSlices:
// /apis/resource.k8s.io/VERSION/resourceslices[/NAME], any method but a
// read.
func isSliceWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	return len(parts) >= 4 && parts[0] == "apis" && parts[1] == "resource.k8s.io" && parts[3] == "resourceslices"
}

// CloseIdleConnections lets the client's idle connections go, as the
// transport it wraps does.
func (p *slicePacer) CloseIdleConnections() {
	if c, ok := p.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
