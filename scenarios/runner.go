package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/cluster"
)

// ErrUnmet means the cluster lacks what a scenario requires.
var ErrUnmet = errors.New("the cluster does not meet the scenario's requirements")

// fieldManager owns what the runner applies.
const fieldManager = "dralab-scenario"

// LabelManagedBy, set to "dralab-scenario", marks every object a scenario
// run creates.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// Runner applies scenarios to a cluster and checks their outcomes.
type Runner struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
	// StepTimeout bounds how long a step may take to reach its expected
	// outcome. A failing step reports its mismatches after it.
	StepTimeout time.Duration
	// OnStep, if set, is told each step's allocation table.
	OnStep func(step string, rows []allocation.Row)
	// KeepNamespace leaves the scenario's namespace for inspection.
	KeepNamespace bool
	// BeforeCleanup, if set, is called before the scenario's objects are
	// deleted, e.g. to collect diagnostics of a failed run.
	BeforeCleanup func(ctx context.Context, result *Result)
	// GPUFaults fails and heals GPUs through their nodes' drivers: only a
	// dralab lab can. Without it, scenarios that fail GPUs are unmet.
	GPUFaults GPUFaulter
}

// GPUFaulter fails and heals a node's GPU, as gpu:fail and gpu:heal do.
type GPUFaulter interface {
	FailGPU(ctx context.Context, node, device string, xid int) error
	HealGPU(ctx context.Context, node, device string) error
}

// NewRunner returns a runner for the cluster of a REST config.
func NewRunner(cfg *rest.Config) (*Runner, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	return &Runner{Client: client, Dynamic: dyn, Mapper: mapper, StepTimeout: time.Minute}, nil
}

// Result is what a scenario run found.
type Result struct {
	Scenario  string
	Namespace string
	Steps     []StepResult
	Duration  time.Duration
	// Swept is what interrupted runs had left, which this run removed
	// before it began (kind/name).
	Swept []string
}

// StepResult is one step's allocation table and mismatches.
type StepResult struct {
	Name     string
	Rows     []allocation.Row
	Failures []string
	// Expectations are the step's expectations, each checked.
	Expectations []ExpectationResult
	// Snapshot is the cluster as the step's outcome was read from it: the
	// nodes and slices, and the scenario namespace's pods and claims.
	Snapshot *allocation.Snapshot
}

// Failures lists every mismatch, prefixed with its step.
func (r *Result) Failures() []string {
	var out []string
	for i, s := range r.Steps {
		for _, f := range s.Failures {
			out = append(out, fmt.Sprintf("steps[%d] %q: %s", i, s.Name, f))
		}
	}
	return out
}

// Passed reports whether every expectation held.
func (r *Result) Passed() bool { return len(r.Failures()) == 0 }

// Run runs a scenario in a namespace of its own and deletes everything it
// created afterwards. An error means the scenario could not run; a
// mismatch between expected and actual outcomes is in the Result.
func (r *Runner) Run(ctx context.Context, s *Scenario) (_ *Result, err error) {
	start := time.Now()
	inv, err := r.inventory(ctx)
	if err != nil {
		return nil, err
	}
	if err := inv.meets(s.Requires); err != nil {
		return nil, fmt.Errorf("scenario %s: %w; it is written for lab/examples/%s (DRALAB_CONFIG=lab/examples/%s go run mage.go lab:up)", s.Name, err, s.LabFile(), s.LabFile())
	}
	if zero := s.zeroCounts(inv); len(zero) > 0 {
		// A count the cluster makes zero asks nothing: the expectation
		// would hold whatever happened.
		return nil, fmt.Errorf("scenario %s: %w: on this cluster %s resolves to 0, which would hold vacuously; it is written for lab/examples/%s", s.Name, ErrUnmet, strings.Join(zero, ", "), s.LabFile())
	}
	if err := r.serves(s.Requires.Resources); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	if s.FailsGPUs() && r.GPUFaults == nil {
		return nil, fmt.Errorf("scenario %s: %w: it fails GPUs through their drivers (failGPU), which only a dralab lab can: run it on one (go run mage.go scenario:run %s)", s.Name, ErrUnmet, s.Name)
	}
	swept, err := r.Sweep(ctx)
	if err != nil {
		return nil, fmt.Errorf("removing what interrupted scenario runs left: %w", err)
	}
	name := fmt.Sprintf("dralab-%s-%s", s.Name, rand.String(5))
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      runLabels(s, name),
		Annotations: map[string]string{AnnotationAliveUntil: aliveUntil(time.Now())},
	}}
	if err := cluster.CreateNamespace(ctx, r.Client, ns); err != nil {
		return nil, fmt.Errorf("creating the scenario's namespace: %w", err)
	}
	run := &run{Runner: r, s: s, ns: ns.Name, inv: inv}
	result := &Result{Scenario: s.Name, Namespace: ns.Name, Swept: swept}
	aliveCtx, stopAlive := context.WithCancel(ctx)
	go run.keepAlive(aliveCtx)
	defer func() {
		stopAlive()
		cctx := context.WithoutCancel(ctx)
		if r.BeforeCleanup != nil {
			r.BeforeCleanup(cctx, result)
		}
		if cerr := run.cleanup(cctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for i, st := range s.Steps {
		if err := run.act(ctx, st); err != nil {
			return result, fmt.Errorf("scenario %s, steps[%d] %q: %w", s.Name, i, st.Name, err)
		}
		sr, err := run.await(ctx, st)
		if err != nil {
			return result, fmt.Errorf("scenario %s, steps[%d] %q: %w", s.Name, i, st.Name, err)
		}
		result.Steps = append(result.Steps, sr)
		if r.OnStep != nil {
			r.OnStep(st.Name, sr.Rows)
		}
	}
	result.Duration = time.Since(start)
	return result, nil
}

// serves checks that the API server serves each resource.
func (r *Runner) serves(resources []string) error {
	var missing []string
	for _, res := range resources {
		gvr, err := ParseResource(res)
		if err != nil {
			return err
		}
		list, err := r.Client.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("asking the API server for %s: %w", gvr.GroupVersion(), err)
		}
		if list == nil || !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == gvr.Resource }) {
			missing = append(missing, res)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the API server does not serve %s: its feature gates and runtime config must switch them on (a dralab lab: featureGates and runtimeConfig, as lab/examples/workloads.yaml does)",
			ErrUnmet, strings.Join(missing, ", "))
	}
	return nil
}

type run struct {
	*Runner
	s   *Scenario
	ns  string
	inv Inventory
	// clusterObjects are cluster-scoped objects the scenario created.
	clusterObjects []*unstructured.Unstructured
	// gone are pods the last action deleted or had evicted.
	gone []string
	// failed are the GPUs the scenario failed, as node/device.
	failed [][2]string
}

// cleanup deletes the cluster-scoped objects and the namespace, and waits
// until the namespace holds no pod and no claim: then every device it held
// is free for the next scenario, even while the namespace itself is still
// terminating.
func (r *run) cleanup(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs []error
	// A GPU the scenario failed is healed, whatever happened.
	if err := r.healGPUs(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, obj := range r.clusterObjects {
		gvk := obj.GroupVersionKind()
		mapping, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			err = r.Dynamic.Resource(mapping.Resource).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", obj.GetKind(), obj.GetName(), err))
		}
	}
	if r.KeepNamespace {
		logger.Info("Keeping the scenario's namespace", "namespace", r.ns)
		return errors.Join(errs...)
	}
	// The namespace controller gets there too, but deleting the pods
	// directly frees their devices seconds sooner. Not with a grace period
	// of 0: such a pod leaves the API before its kubelet has unprepared
	// its claims, so its devices would look free while their driver still
	// holds them, and whoever uses the lab next (another scenario, the
	// conformance sanity layer) would be refused them. With a grace period
	// the kubelet removes the pod once it has unprepared its claims.
	graceful := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}
	if err := r.Client.CoreV1().Pods(r.ns).DeleteCollection(ctx, graceful, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := r.Client.ResourceV1().ResourceClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := r.Client.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := r.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		claims, err := r.Client.ResourceV1().ResourceClaims(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("namespace %s still holds pods or claims: %w", r.ns, err))
	}
	return errors.Join(errs...)
}
