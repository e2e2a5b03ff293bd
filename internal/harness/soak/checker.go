package soak

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// checker evaluates invariants and keeps the violations.
type checker struct {
	mu    sync.Mutex
	start time.Time
	// suspects are findings seen once, with when: a finding about
	// objects that change one after the other is a violation only when
	// it persists.
	suspects   map[string]time.Time
	reported   map[string]bool
	checks     map[string]int
	rounds     int
	violations []Violation
	claims     map[types.UID]bool
	// running are the pods seen running; startSeconds how long each took
	// from being scheduled.
	running      map[types.UID]bool
	startSeconds []float64
}

func newChecker() *checker {
	return &checker{start: time.Now(), suspects: map[string]time.Time{}, reported: map[string]bool{}, checks: map[string]int{},
		claims: map[types.UID]bool{}, running: map[types.UID]bool{}}
}

// started records how long the pods seen running for the first time took
// from being scheduled to their container's start.
func (c *checker) started(pods []v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range pods {
		p := &pods[i]
		if c.running[p.UID] || p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		st := p.Status.ContainerStatuses[0].State.Running
		if st == nil {
			continue
		}
		c.running[p.UID] = true
		c.startSeconds = append(c.startSeconds, max(0, st.StartedAt.Sub(scheduledAt(p)).Seconds()))
	}
}

// immediate are the invariants whose one observation is proof: they read
// one consistent list of claims (and slices, which only their drivers
// change).
var immediate = map[string]bool{InvExclusive: true, InvCapacity: true}

// evaluate runs checks on an observation.
func evaluate(ctx context.Context, checks []check, o *observation) ([]finding, error) {
	var out []finding
	for _, c := range checks {
		found, err := c.run(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out = append(out, found...)
	}
	return out, nil
}

// round runs checks on an observation and records what they find: at
// once for the immediate invariants, else once the same finding has
// persisted for confirm.
func (c *checker) round(ctx context.Context, checks []check, o *observation, confirm time.Duration) error {
	found, err := evaluate(ctx, checks, o)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.rounds++
	for _, ch := range checks {
		c.checks[ch.name]++
	}
	seen := map[string]bool{}
	var confirmed []finding
	for _, f := range found {
		seen[f.key] = true
		first, suspected := c.suspects[f.key]
		switch {
		case immediate[f.invariant] || suspected && o.at.Sub(first) >= confirm:
			confirmed = append(confirmed, f)
		case !suspected:
			c.suspects[f.key] = o.at
		}
	}
	for key := range c.suspects {
		if !seen[key] {
			delete(c.suspects, key)
		}
	}
	c.mu.Unlock()
	for _, f := range confirmed {
		c.violate(f)
	}
	return nil
}

// count records one evaluation of an invariant outside a round.
func (c *checker) count(invariant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks[invariant]++
}

// violate records a violation, once per finding.
func (c *checker) violate(f finding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported[f.key] {
		return
	}
	c.reported[f.key] = true
	c.violations = append(c.violations, Violation{At: time.Since(c.start).Round(time.Millisecond), Invariant: f.invariant, Message: f.message, Objects: f.objects})
}

func (c *checker) results() (map[string]int, int, []Violation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sort.SliceStable(c.violations, func(i, j int) bool { return c.violations[i].At < c.violations[j].At })
	return c.checks, c.rounds, c.violations
}
