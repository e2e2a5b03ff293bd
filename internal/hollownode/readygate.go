package hollownode

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// readyGate holds a node's API requests until the API server serves the
// node, then lets every request through. A node starts beside its lab's
// control plane; a kubelet that finds no API server backs off between its
// registration attempts (0.1 s, doubled each time, up to 7 s), so the lab
// would wait for the kubelet's next attempt after the API server began to
// serve: the gate makes the first attempt come as it does.
//
// The gate asks for the node's own Node with the node's credentials: an
// answer (200, or 404 before it registers) says that the API server
// serves and that the Node authorizer admits the node. A node needs no
// more: the Node authorizer's rules are built in, so the node registers
// while the API server still writes its bootstrap roles (which /readyz
// waits for, and which the node's own read of /readyz would need).
type readyGate struct {
	next  http.RoundTripper
	probe string // the node's own Node
	// poll is how often the gate asks; limit is how long it holds a
	// request at most, after which requests go through, failing as they
	// would without it.
	poll, limit time.Duration

	mu   sync.Mutex
	open bool
}

func newReadyGate(next http.RoundTripper, host, node string) *readyGate {
	u := url.URL{Path: "/api/v1/nodes/" + node}
	probe := host
	if base, err := url.Parse(host); err == nil {
		probe = base.ResolveReference(&u).String()
	}
	return &readyGate{next: next, probe: probe, poll: 20 * time.Millisecond, limit: 2 * time.Minute}
}

func (g *readyGate) RoundTrip(req *http.Request) (*http.Response, error) {
	g.wait(req.Context())
	return g.next.RoundTrip(req)
}

// wait returns once the API server answered for the node, the gate's
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
	// The lab binds the API server's port before the API server serves
	// it: a probe sent meanwhile waits in the listener's queue and is
	// answered once the API server serves, as long as it has not given up
	// by then (one that has leaves the API server a request it cannot
	// answer, logged as an error).
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.probe, nil)
	if err != nil {
		return false
	}
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound
}
