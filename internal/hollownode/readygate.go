package hollownode

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// readyGate holds a node's API requests until the API server answers its
// /readyz, then lets every request through. A node starts beside its lab's
// control plane; a kubelet that finds no API server backs off between its
// registration attempts (0.1 s, doubled each time, up to 7 s), so the lab
// would wait for the kubelet's next attempt after the API server became
// ready: the gate makes the first attempt come as the API server is ready.
// The node's own credentials read /readyz once the API server has its
// bootstrap roles, as the kubelet needs them to register.
type readyGate struct {
	next   http.RoundTripper
	readyz string // the API server's /readyz
	// poll is how often the gate asks; limit is how long it holds a
	// request at most, after which requests go through, failing as they
	// would without it.
	poll, limit time.Duration

	mu   sync.Mutex
	open bool
}

func newReadyGate(next http.RoundTripper, host string) *readyGate {
	u := url.URL{Path: "/readyz"}
	readyz := host
	if base, err := url.Parse(host); err == nil {
		readyz = base.ResolveReference(&u).String()
	}
	return &readyGate{next: next, readyz: readyz, poll: 50 * time.Millisecond, limit: 2 * time.Minute}
}

func (g *readyGate) RoundTrip(req *http.Request) (*http.Response, error) {
	g.wait(req.Context())
	return g.next.RoundTrip(req)
}

// wait returns once the API server answered /readyz with 200, the gate's
// limit has passed, or ctx ended. The requests that arrive meanwhile wait
// together: one of them asks at a time.
func (g *readyGate) wait(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return
	}
	deadline := time.Now().Add(g.limit)
	t := time.NewTicker(g.poll)
	defer t.Stop()
	for !g.ready(ctx) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	g.open = true
}

func (g *readyGate) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.readyz, nil)
	if err != nil {
		return false
	}
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
