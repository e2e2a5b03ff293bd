// Package soak is the lab's chaos soak: on an embedded lab of its own it
// churns pods and claims of every kind the lab's GPUs serve (exact,
// firstAvailable, a claim two pods share, an extended resource, MIG slices,
// shares of a GPU's memory) while it injects faults at random (drivers,
// kubelets, a real node's containerd and the lab process itself killed;
// GPUs failed and healed), and checks invariants all along and after a
// final settle: no device allocated twice or beyond its capacity, every
// prepared claim allocated to its node and every running pod's claim
// prepared once, no CDI spec left of a deleted claim, every pod running or
// pending for a reason the report names, and nothing of the lab left after
// lab:down.
package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// Options say how to soak.
type Options struct {
	// Config is the lab to soak; Name is replaced by the soak's own.
	Config *config.Config
	// Binary is the dralab binary the lab runs.
	Binary string
	// Duration is how long pods churn and faults are injected (default 2
	// minutes); the settle and lab:down come after.
	Duration time.Duration
	// Seed makes the soak's choices repeatable (0: one from the clock,
	// reported).
	Seed uint64
	// ChurnInterval, FaultInterval and CheckInterval are the mean times
	// between churn steps (default 400 ms), faults (default 8 s) and
	// invariant checks (default 2 s).
	ChurnInterval, FaultInterval, CheckInterval time.Duration
	// MaxGroups bounds the pods (and shared claims) alive at once
	// (default 16).
	MaxGroups int
	// SettleTimeout bounds the final settle (default 3 minutes).
	SettleTimeout time.Duration
	// Progress, when set, is told of each phase as it starts and ends.
	Progress func(step string) (done func(error))
}

func (o *Options) complete() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Duration, 2*time.Minute)
	def(&o.ChurnInterval, 400*time.Millisecond)
	def(&o.FaultInterval, 8*time.Second)
	def(&o.CheckInterval, 2*time.Second)
	def(&o.SettleTimeout, 3*time.Minute)
	if o.MaxGroups <= 0 {
		o.MaxGroups = 16
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Progress == nil {
		o.Progress = func(string) func(error) { return func(error) {} }
	}
}

// podBounds are how long a pod may wait while the soak runs: a killed
// driver is back within seconds, but the kubelet retries a pod's
// preparation on a back-off of its own, and a resumed lab's scheduler
// starts its queue anew.
var podBounds = bounds{containerCreating: time.Minute, terminating: time.Minute, unexplained: 45 * time.Second}

// confirmAfter is how long a finding about objects that change one after
// the other (a claim and a driver's files) must persist to be a
// violation.
const confirmAfter = 3 * time.Second

// Report is what a soak did and found.
type Report struct {
	Lab  string `json:"lab"`
	Seed uint64 `json:"seed"`
	// Kinds are the kinds of claims churned.
	Kinds []string `json:"kinds"`
	// Duration is the time spent churning and injecting faults;
	// SettleSeconds how long the cluster then took to settle.
	Duration      time.Duration `json:"duration"`
	SettleSeconds float64       `json:"settleSeconds"`
	// Faults counts the faults injected by kind; Events lists them.
	Faults map[string]int `json:"faults"`
	Events []Event        `json:"events"`
	// FaultErrors are faults that could not be injected when their turn
	// came (a GPU to heal that its node did not publish at that moment).
	FaultErrors []string `json:"faultErrors,omitempty"`
	// Groups counts what was churned by kind: pods with their claim (two
	// pods for a shared claim).
	Groups        map[string]int `json:"groups"`
	PodsCreated   int            `json:"podsCreated"`
	PodsDeleted   int            `json:"podsDeleted"`
	ClaimsSeen    int            `json:"claimsSeen"`
	ClaimsDeleted int            `json:"claimsDeleted"`
	// APIErrors counts churn requests the API server failed, ReadErrors
	// the checks' reads of the cluster that failed (each read again at
	// the next check).
	APIErrors  int `json:"apiErrors"`
	ReadErrors int `json:"readErrors"`
	// Start is how long pods took from being scheduled to their container
	// running (the kubelet preparing their claims), in seconds (the API's
	// timestamps have whole seconds), over every pod seen running.
	Start Latency `json:"startSeconds"`
	// Checks counts invariant evaluations by invariant; Rounds the rounds
	// of checks.
	Checks     map[string]int `json:"checks"`
	Rounds     int            `json:"rounds"`
	Violations []Violation    `json:"violations"`
	// Failure says why the soak failed (violations, or a lab that did
	// not come up, resume or go down); empty when it passed.
	Failure string `json:"failure,omitempty"`
}

// Latency summarises durations in seconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

func summarise(seconds []float64) Latency {
	if len(seconds) == 0 {
		return Latency{}
	}
	s := slices.Sorted(slices.Values(seconds))
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Latency{Count: len(s), P50: at(0.5), P99: at(0.99), Max: s[len(s)-1]}
}

// Event is one injected fault.
type Event struct {
	At     time.Duration `json:"at"`
	Kind   string        `json:"kind"`
	Target string        `json:"target"`
}

// Violation is an invariant that did not hold, with the objects involved.
type Violation struct {
	At        time.Duration `json:"at"`
	Invariant string        `json:"invariant"`
	Message   string        `json:"message"`
	Objects   []string      `json:"objects"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %s: %s [%s]", v.Invariant, v.At.Round(time.Second), v.Message, strings.Join(v.Objects, "; "))
}

// TotalChecks is the number of invariant evaluations.
func (r *Report) TotalChecks() int {
	n := 0
	for _, c := range r.Checks {
		n += c
	}
	return n
}

// ErrViolations means the soak found invariants that did not hold.
var ErrViolations = errors.New("invariants violated")

// labName is the soak lab's name: its state lives in a directory of its
// own, so that it never meets a lab a person uses.
const labName = "soak"

// Run soaks a fresh embedded lab of o.Config and deletes it. The report
// is returned even with an error, which its Failure repeats; ErrViolations
// when invariants failed.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	o.complete()
	rep = &Report{Lab: labName, Seed: o.Seed, Faults: map[string]int{}, Groups: map[string]int{}}
	defer func() {
		if err != nil {
			rep.Failure = err.Error()
		}
	}()
	cfg := *o.Config
	cfg.Name = labName
	root, err := os.MkdirTemp("", "dl-soak-")
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, mounts.RemoveAll(root)) }()
	l, err := lab.New(lab.WithConfig(&cfg), lab.WithStateRoot(root), lab.WithBinary(o.Binary), lab.WithRetain(true), lab.WithOwner(os.Getpid()))
	if err != nil {
		return rep, err
	}
	if l.Backend() != config.BackendEmbedded {
		return rep, fmt.Errorf("the soak kills and resumes the lab's processes: it needs the embedded backend, not %s", l.Backend())
	}
	done := o.Progress(fmt.Sprintf("Starting the soak's lab (%d nodes)", len(cfg.Nodes)))
	_, err = l.Up(ctx)
	done(err)
	if err != nil {
		return rep, errors.Join(err, l.Down(context.WithoutCancel(ctx)))
	}
	c := newChecker()
	s := &soak{o: o, lab: l, rep: rep, checker: c}
	runErr := s.run(ctx)

	// lab:down, then nothing of the lab may remain.
	st, stErr := l.Status(ctx)
	var leftovers []finding
	done = o.Progress("Deleting the soak's lab and checking that nothing of it remains")
	if stErr == nil {
		var before labResources
		before, stErr = recordResources(st)
		if downErr := l.Down(context.WithoutCancel(ctx)); downErr != nil {
			stErr = downErr
		} else {
			leftovers = before.left()
		}
	}
	done(stErr)
	c.count(InvLeftovers)
	for _, f := range leftovers {
		c.violate(f)
	}
	rep.Checks, rep.Rounds, rep.Violations = c.results()
	c.mu.Lock()
	rep.Start = summarise(c.startSeconds)
	c.mu.Unlock()
	err = errors.Join(runErr, stErr)
	if err == nil && len(rep.Violations) > 0 {
		err = fmt.Errorf("%w: %d", ErrViolations, len(rep.Violations))
	}
	return rep, err
}

// soak is one run.
type soak struct {
	o   Options
	lab *lab.Lab
	// nodes are the lab's nodes as its status gave them at the start:
	// where each node's driver keeps its checkpoint and CDI specs.
	nodes   []lab.NodeStatus
	client  kubernetes.Interface
	rep     *Report
	checker *checker
	// pause is held for writing while the lab process is down.
	pause sync.RWMutex
}

// Streams of the soak's random choices: each goroutine has its own, so
// that a seed repeats the same choices.
const (
	streamChurn uint64 = iota + 1
	streamFaults
	streamChurnTimes
	streamFaultTimes
)

func (s *soak) rand(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(s.o.Seed, stream)) }

func (s *soak) run(ctx context.Context) error {
	st, err := s.lab.Status(ctx)
	if err != nil {
		return err
	}
	s.nodes = st.Nodes
	restConfig, err := clientcmd.BuildConfigFromFlags("", s.lab.Kubeconfig())
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = 100, 200
	if s.client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return err
	}
	list, err := s.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	inv, err := readInventory(ctx, list.Items)
	if err != nil {
		return err
	}
	s.rep.Kinds = inv.kinds()
	if len(s.rep.Kinds) == 0 {
		return fmt.Errorf("%w: nothing to churn", ErrNoGPUs)
	}
	w := &workload{client: s.client, inv: inv, rng: s.rand(streamChurn)}
	if err := w.setup(ctx); err != nil {
		return err
	}
	f := &faults{lab: s.lab, cfg: s.lab.Config(), client: s.client, rng: s.rand(streamFaults)}

	done := s.o.Progress(fmt.Sprintf("Churning %s for %s while injecting faults (seed %d)", strings.Join(s.rep.Kinds, ", "), s.o.Duration, s.o.Seed))
	start := time.Now()
	s.checker.start = start
	churnCtx, stop := context.WithTimeout(ctx, s.o.Duration)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); s.churn(churnCtx, w) }()
	go func() {
		defer wg.Done()
		if err := s.inject(ctx, churnCtx, f); err != nil {
			errs <- err
			stop() // the lab is not up: nothing more to churn
		}
	}()
	go func() { defer wg.Done(); errs <- s.checkContinuously(churnCtx) }()
	wg.Wait()
	stop()
	close(errs)
	var runErrs []error
	for err := range errs {
		runErrs = append(runErrs, err)
	}
	s.rep.Duration = time.Since(start).Round(time.Millisecond)
	err = errors.Join(runErrs...)
	done(err)
	if err != nil {
		return err
	}

	done = s.o.Progress("Healing every failed GPU and waiting for the lab to settle")
	settleStart := time.Now()
	err = f.healAll(ctx)
	if err == nil {
		err = s.settle(ctx)
	}
	s.rep.SettleSeconds = time.Since(settleStart).Seconds()
	done(err)
	return err
}

// jitter is d ± half of d, at random.
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

// churn creates and deletes groups of every kind until ctx ends.
func (s *soak) churn(ctx context.Context, w *workload) {
	logger := klog.FromContext(ctx)
	times := s.rand(streamChurnTimes)
	var live []group
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(times, s.o.ChurnInterval)):
		}
		s.pause.RLock()
		var err error
		if len(live) == 0 || len(live) < s.o.MaxGroups && w.rng.IntN(10) < 6 {
			kind := s.rep.Kinds[w.rng.IntN(len(s.rep.Kinds))]
			var g group
			if g, err = w.create(ctx, kind); err == nil {
				live = append(live, g)
				s.rep.Groups[kind]++
				s.rep.PodsCreated += len(g.pods)
			}
		} else {
			i := w.rng.IntN(len(live))
			if err = w.delete(ctx, live[i]); err == nil {
				s.rep.PodsDeleted += len(live[i].pods)
				live = slices.Delete(live, i, i+1)
			}
		}
		s.pause.RUnlock()
		if err != nil && ctx.Err() == nil {
			s.rep.APIErrors++
			logger.V(1).Info("Churn request failed", "err", err)
		}
	}
}

// inject injects a fault every FaultInterval (on average) until `until`
// ends. A fault under way finishes (a killed lab is brought up again)
// unless ctx ends.
func (s *soak) inject(ctx, until context.Context, f *faults) error {
	logger := klog.FromContext(ctx)
	times := s.rand(streamFaultTimes)
	for {
		select {
		case <-until.Done():
			return nil
		case <-time.After(jitter(times, s.o.FaultInterval)):
		}
		kind, target, err := f.inject(ctx, &s.pause, s.checker)
		switch {
		case err != nil && kind == FaultKillLab:
			return fmt.Errorf("injecting %s (%s): %w", kind, target, err)
		case err != nil:
			// Tried again at the kind's next turn.
			s.rep.FaultErrors = append(s.rep.FaultErrors, fmt.Sprintf("%s: %v", kind, err))
			logger.Info("Fault not injected", "kind", kind, "err", err)
			continue
		}
		if kind == "" {
			continue
		}
		at := time.Since(s.checker.start).Round(time.Millisecond)
		s.rep.Faults[kind]++
		s.rep.Events = append(s.rep.Events, Event{At: at, Kind: kind, Target: target})
		logger.Info("Fault injected", "at", at, "kind", kind, "target", target)
	}
}

// checkContinuously checks the continuous invariants every CheckInterval
// until ctx ends, except while the lab process is down.
func (s *soak) checkContinuously(ctx context.Context) error {
	checks := continuousChecks(podBounds)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.o.CheckInterval):
		}
		s.pause.RLock()
		obs, err := s.observe(ctx)
		if err != nil {
			s.pause.RUnlock()
			if ctx.Err() == nil {
				// Read again at the next check.
				s.rep.ReadErrors++
				klog.FromContext(ctx).Info("Reading the cluster for a check failed", "err", err)
			}
			continue
		}
		err = s.checker.round(ctx, checks, obs, confirmAfter)
		s.pause.RUnlock()
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// settle waits until the lab is healthy and the settled invariants hold,
// then records what the last check found.
func (s *soak) settle(ctx context.Context) error {
	checks := settledChecks()
	var last []finding
	var healthy []finding
	err := wait.PollUntilContextTimeout(ctx, s.o.CheckInterval, s.o.SettleTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if healthy, err = s.labHealthy(ctx); err != nil {
			return false, err
		}
		obs, err := s.observe(ctx)
		if err != nil {
			return false, err
		}
		if last, err = evaluate(ctx, checks, obs); err != nil {
			return false, err
		}
		return len(healthy) == 0 && len(last) == 0, nil
	})
	if err != nil && !wait.Interrupted(err) {
		return err
	}
	s.checker.mu.Lock()
	s.checker.rounds++
	s.checker.mu.Unlock()
	for _, c := range checks {
		s.checker.count(c.name)
	}
	s.checker.count(InvLabHealthy)
	for _, f := range append(healthy, last...) {
		s.checker.violate(f)
	}
	return nil
}

// labHealthy finds the lab's processes that do not run and nodes that are
// not Ready.
func (s *soak) labHealthy(ctx context.Context) ([]finding, error) {
	st, err := s.lab.Status(ctx)
	if err != nil {
		return nil, err
	}
	var out []finding
	if st.Phase != "Running" {
		out = append(out, newFinding(InvLabHealthy, fmt.Sprintf("lab %s: %s", st.Phase, st.Message), "lab "+st.Name))
	}
	for _, n := range st.Nodes {
		if !n.Healthy || n.Ready != "True" {
			out = append(out, newFinding(InvLabHealthy, fmt.Sprintf("process %s, driver %s, Ready %s", n.Process, n.Driver, n.Ready), "node "+n.Name))
		}
	}
	return out, nil
}

// observe reads the cluster and the drivers' checkpoints and CDI specs.
func (s *soak) observe(ctx context.Context) (*observation, error) {
	o := &observation{checkpoints: map[string]*kit.Checkpoint{}, cdiSpecs: map[string][]string{}}
	for _, n := range s.nodes {
		cp, err := readCheckpoint(filepath.Join(n.CheckpointDir, "checkpoint.json"))
		if err != nil {
			return nil, err
		}
		if cp != nil {
			o.checkpoints[n.Name] = cp
		}
		entries, err := os.ReadDir(n.CDIDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, e := range entries {
			o.cdiSpecs[n.Name] = append(o.cdiSpecs[n.Name], e.Name())
		}
	}
	pods, err := s.client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claims, err := s.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	resourceSlices, err := s.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	classes, err := s.client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rules, err := s.client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	o.at = time.Now()
	o.pods, o.claims, o.slices, o.nodes, o.classes, o.rules = pods.Items, claims.Items, resourceSlices.Items, nodes.Items, classes.Items, rules.Items
	s.countClaims(o.claims)
	s.checker.started(o.pods)
	return o, nil
}

// countClaims counts the claims seen and, of those, the ones gone since.
func (s *soak) countClaims(claims []resourceapi.ResourceClaim) {
	c := s.checker
	c.mu.Lock()
	defer c.mu.Unlock()
	now := map[types.UID]bool{}
	for _, cl := range claims {
		now[cl.UID] = true
		if !c.claims[cl.UID] {
			c.claims[cl.UID] = true
			s.rep.ClaimsSeen++
		}
	}
	for uid := range c.claims {
		if !now[uid] {
			delete(c.claims, uid)
			s.rep.ClaimsDeleted++
		}
	}
}

// readCheckpoint reads a GPU driver's checkpoint; nil when the driver has
// written none.
func readCheckpoint(path string) (*kit.Checkpoint, error) {
	cp, err := kit.ReadCheckpoint(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return cp, err
}
