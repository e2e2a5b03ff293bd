// Package cluster is layer 2 of dralab's DRA driver conformance suite:
// e2e-framework features that check, on a running cluster, what a driver's
// manifest says it supports. Device counts and attributes are discovered
// from the driver's ResourceSlices, never declared. A feature whose
// capability the manifest does not enable is skipped, saying so; one the
// manifest enables but the suite has no check for fails.
//
// Everything the features create (namespaces, claims, pods,
// DeviceTaintRules) carries LabelManagedBy and LabelRun and is removed when
// its feature ends, however it ends; the first feature of a run first
// removes what an interrupted run left, found by LabelManagedBy, and
// nothing else. The only device a feature taints is one it was allocated.
//
// Run runs them and returns their results (dralab-conformance does); a
// driver author's own e2e-framework suite can run them as features:
//
//	testenv.Test(t, cluster.Features(m, cluster.Options{})...)
package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
)

// Options tune the features to the cluster.
type Options struct {
	// Image runs the proof containers; it must have sh and env. Empty:
	// busybox.
	Image string
	// PullPolicy of the proof containers; empty: IfNotPresent.
	PullPolicy v1.PullPolicy
	// RunID is the value of LabelRun on what the run creates; empty: a
	// random one.
	RunID string
	// CommandEnv are variables (KEY=value) added to the environment of the
	// manifest's health commands, e.g. which lab they act on.
	CommandEnv []string
}

// Labels of every object the suite creates. A run removes objects with
// LabelManagedBy=ManagedBy and another LabelRun before its first feature:
// what an interrupted run left behind.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "dralab-conformance"
	LabelRun       = "conformance.dralab.dev/run"
)

// TaintKey is the key of the taint the device-taints feature puts on the
// one device it was allocated.
const TaintKey = "conformance.dralab.dev/tainted"

// LabelCapability labels each feature with the capability it checks
// ("core" for what every driver must do), for --labels.
const LabelCapability = "capability"

// Result is what one feature found.
type Result struct {
	// Feature is the feature's name, e.g. "single device".
	Feature string
	// Capability is what the feature checks: "core" for what every driver
	// must do, else the manifest's capability.
	Capability string
	// Rule is what the feature requires of the driver, in words.
	Rule   string
	Status results.Status
	// Message says why the feature failed or was skipped.
	Message string
	// Log is what the check noted as it ran: what it saw the driver do.
	Log     []string
	Elapsed time.Duration
}

// Run runs every feature of the manifest's driver on the cluster of cfg,
// one after the other, and returns a result per feature. A misbehaving
// driver or cluster fails features; it never makes Run panic.
func Run(ctx context.Context, m *manifest.Manifest, cfg *rest.Config, o Options) []Result {
	s := newSuite(m, o)
	var out []Result
	for _, f := range s.features() {
		var log []string
		r := s.run(ctx, cfg, f, func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) })
		r.Log = log
		out = append(out, r)
	}
	return out
}

// Features returns one e2e-framework feature per check of the manifest's
// driver, labelled with LabelCapability, for a driver author's own suite.
func Features(m *manifest.Manifest, o Options) []features.Feature {
	s := newSuite(m, o)
	var out []features.Feature
	for _, f := range s.features() {
		out = append(out, features.New(f.name).WithLabel(LabelCapability, f.label()).
			Assess(f.rule, func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				r := s.run(ctx, cfg.Client().RESTConfig(), f, t.Logf)
				switch r.Status {
				case results.Skipped:
					t.Skip(r.Message)
				case results.Failed:
					t.Fatal(r.Message)
				}
				return ctx
			}).Feature())
	}
	return out
}

func newSuite(m *manifest.Manifest, o Options) *suite {
	if o.Image == "" {
		o.Image = "busybox:1.37"
	}
	if o.PullPolicy == "" {
		o.PullPolicy = v1.PullIfNotPresent
	}
	if o.RunID == "" {
		o.RunID = rand.String(8)
	}
	return &suite{m: m, o: o}
}

// feature is one check with what it checks.
type feature struct {
	name       string
	capability manifest.Capability
	rule       string
	check      check
}

func (f feature) label() string {
	if f.capability == "" {
		return "core"
	}
	return string(f.capability)
}

// features are the suite's checks in the order they run.
func (s *suite) features() []feature {
	return []feature{
		{"single device", "", "a pod with a claim of the class runs and proves its device", s.singleDevice},
		{"shared claim", manifest.SharedClaims, "two pods sharing one claim prove the same device", s.sharedClaim},
		{"prioritized list", manifest.DRAPrioritizedList, "the first class with a free device is chosen", s.prioritizedList},
		{"admin access", manifest.DRAAdminAccess, "an admin claim gets an in-use device, the workload keeps it", s.adminAccess},
		{"device taints", manifest.DRADeviceTaints, "tainted devices are not allocated until untainted", s.deviceTaints},
		{"extended resource", manifest.DRAExtendedResource, "a pod asking for the extended resource gets a device", s.extendedResource},
		{"opaque config", manifest.OpaqueConfig, "valid configuration is prepared, invalid configuration fails preparation", s.opaqueConfig},
		{"partitionable devices", manifest.DRAPartitionableDevices, "partitions are allocated until their counters are exhausted, never beyond, and the next claim waits", s.partitions},
		{"consumable capacity", manifest.DRAConsumableCapacity, "two claims share one device with distinct shareIDs within its capacity", s.shares},
		{"binding conditions", manifest.DRADeviceBindingConditions, "a pod is not bound before its device's binding conditions are True in the claim's status, and is bound and runs after", s.bindingConditions},
		{"claim device status", manifest.DRAResourceClaimDeviceStatus, "a prepared claim's status.devices has the driver's entry for its device, removed once the claim is unprepared", s.deviceStatus},
		{"resource health", manifest.ResourceHealthStatus, "a failed device is reported Unhealthy in the status of the pod that holds it", s.health},
	}
}

type suite struct {
	m *manifest.Manifest
	o Options
	// leftovers removes, once per run, what an earlier run left.
	leftovers    sync.Once
	leftoversErr error
}

// labels mark what the run creates.
func (s *suite) labels() map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelRun: s.o.RunID}
}

// logFunc notes what a check saw, as t.Logf does.
type logFunc func(format string, args ...any)

type check func(ctx context.Context, logf logFunc, k *kit) error

// run runs one feature: skipped when its capability is off, run in a
// namespace of its own that is deleted afterwards, after what an earlier
// run left is gone. A check that passed but left something behind fails.
func (s *suite) run(ctx context.Context, cfg *rest.Config, f feature, logf logFunc) (r Result) {
	r = Result{Feature: f.name, Capability: f.label(), Rule: f.rule}
	start := time.Now()
	defer func() { r.Elapsed = time.Since(start) }()
	fail := func(format string, args ...any) Result {
		r.Status, r.Message = results.Failed, fmt.Sprintf(format, args...)
		return r
	}
	switch skip, failure := gate(s.m, f.capability, f.check != nil); {
	case skip != "":
		r.Status, r.Message = results.Skipped, skip
		return r
	case failure != "":
		return fail("%s", failure)
	}
	client, err := kubernetes.NewForConfig(clientConfig(cfg))
	if err != nil {
		return fail("%v", err)
	}
	// Claims an interrupted run left hold devices; its rules taint them.
	s.leftovers.Do(func() {
		var removed []string
		removed, s.leftoversErr = removeLeftovers(ctx, client, s.o.RunID, s.m.Timeouts.PodRunning)
		if len(removed) > 0 {
			logf("removed what an earlier run left: %s", strings.Join(removed, ", "))
		}
	})
	if s.leftoversErr != nil {
		return fail("removing what an earlier run left: %v", s.leftoversErr)
	}
	k := &kit{suite: s, client: client, ns: "conformance-" + rand.String(5)}
	if err := k.createNamespace(ctx, f.capability == manifest.DRAAdminAccess); err != nil {
		return fail("%v", err)
	}
	defer func() {
		if p := recover(); p != nil {
			r.Status, r.Message = results.Failed, fmt.Sprintf("%s: internal: the check panicked: %v", f.name, p)
		}
		if err := k.cleanup(ctx); err != nil {
			if r.Status == results.Failed {
				r.Message += "; cleaning up also failed: " + err.Error()
			} else {
				r.Status, r.Message = results.Failed, err.Error()
			}
		}
	}()
	err = f.check(ctx, logf, k)
	if skip := (skipCheck{}); errors.As(err, &skip) {
		r.Status, r.Message = results.Skipped, skip.reason
		return r
	}
	if err != nil {
		return fail("%s: %v", f.name, err)
	}
	r.Status = results.Passed
	return r
}

// gate says why a feature does not run its check: a reason to skip when
// the manifest does not enable its capability, a reason to fail when it
// does but the suite has no check for it, so that a run passes only on
// what it verified.
func gate(m *manifest.Manifest, capability manifest.Capability, checked bool) (skip, fail string) {
	switch {
	case capability != "" && !m.Enabled(capability):
		return fmt.Sprintf("the manifest does not enable %s", capability), ""
	case !checked:
		return "", fmt.Sprintf("the manifest enables %s, but this suite has no check for it: it is not verified; disable it until the suite checks it", capability)
	}
	return "", ""
}

// skipCheck is a check that cannot apply to this driver or cluster, with
// the reason.
type skipCheck struct{ reason string }

func (s skipCheck) Error() string { return s.reason }

// clientConfig is the suite's client configuration: the checks poll a few
// objects five times a second, which client-go's default limits (5 queries
// a second, bursts of 10) would throttle, slowing every check and, near a
// deadline, failing calls with the rate limiter's error.
func clientConfig(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	if c.QPS == 0 && c.Burst == 0 && c.RateLimiter == nil {
		c.QPS, c.Burst = 50, 100
	}
	return c
}

// kit is what a check works with.
type kit struct {
	*suite
	client kubernetes.Interface
	ns     string
	// rules are the DeviceTaintRules the check created.
	rules []string
}

// meta names an object of the check's namespace, labelled as the run's.
func (k *kit) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: k.labels()}
}

func (k *kit) createNamespace(ctx context.Context, adminAccess bool) error {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns, Labels: k.labels()}}
	if adminAccess {
		// Only namespaces labelled so may hold claims with admin access.
		ns.Labels["resource.kubernetes.io/admin-access"] = "true"
	}
	_, err := k.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	return err
}

// cleanup removes what the check created: its DeviceTaintRules first, its
// pods and claims (waiting, so that the next check finds the devices
// free), then its namespace. It works on a context of its own: a check
// that failed, timed out or was cancelled leaves nothing behind.
func (k *kit) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.m.Timeouts.PodRunning+time.Minute)
	defer cancel()
	errs := []error{deleteEach(ctx, "DeviceTaintRule", k.rules, k.client.ResourceV1().DeviceTaintRules().Delete)}
	var pods, claims []string
	podList, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, p := range podList.Items {
			pods = append(pods, p.Name)
		}
	}
	claimList, err := k.client.ResourceV1().ResourceClaims(k.ns).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, c := range claimList.Items {
			claims = append(claims, c.Name)
		}
	}
	errs = append(errs,
		k.remove(ctx, pods, claims),
		deleteEach(ctx, "namespace", []string{k.ns}, k.client.CoreV1().Namespaces().Delete))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleanup of %s: %w", k.ns, err)
	}
	return nil
}

// remove deletes pods, waits until they are gone, then deletes claims and
// waits until they are gone too. Pods are deleted gracefully, never
// forced: the kubelet removes a pod only once it has unprepared the pod's
// claims, so that, once the pods are gone, their devices are free on the
// node as well as in the API (a forced deletion frees them in the API
// while the driver still holds them, and the next check's claim is
// refused).
func (k *kit) remove(ctx context.Context, pods, claims []string) error {
	podsAPI, claimsAPI := k.client.CoreV1().Pods(k.ns), k.client.ResourceV1().ResourceClaims(k.ns)
	deletePod := func(ctx context.Context, name string, o metav1.DeleteOptions) error {
		// Not 0, the pods' own termination grace period, which would
		// force the deletion.
		o.GracePeriodSeconds = ptr.To[int64](1)
		return podsAPI.Delete(ctx, name, o)
	}
	if err := deleteEach(ctx, "pod", pods, deletePod); err != nil {
		return err
	}
	if err := k.waitGone(ctx, "pods", pods, func(ctx context.Context, name string) error {
		_, err := podsAPI.Get(ctx, name, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := deleteEach(ctx, "claim", claims, claimsAPI.Delete); err != nil {
		return err
	}
	return k.waitGone(ctx, "claims", claims, func(ctx context.Context, name string) error {
		_, err := claimsAPI.Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

// waitGone waits until get says NotFound for every name.
func (k *kit) waitGone(ctx context.Context, kind string, names []string, get func(context.Context, string) error) error {
	return poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("%s %v of %s to be deleted", kind, names, k.ns), func(ctx context.Context) (string, bool, error) {
		var (
			left    []string
			lastErr error
		)
		for _, name := range names {
			switch err := get(ctx, name); {
			case apierrors.IsNotFound(err):
			case err != nil:
				left, lastErr = append(left, name), err
			default:
				left = append(left, name)
			}
		}
		return fmt.Sprintf("%v remain", left), len(left) == 0, lastErr
	})
}

// deleteEach deletes the named objects of a kind; one already gone is no
// error.
func deleteEach(ctx context.Context, kind string, names []string, del func(context.Context, string, metav1.DeleteOptions) error) error {
	var errs []error
	for _, name := range names {
		if err := del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", kind, name, err))
		}
	}
	return errors.Join(errs...)
}

// removeLeftovers deletes what an earlier run left, and nothing else:
// DeviceTaintRules, claims and namespaces labelled
// LabelManagedBy=ManagedBy whose LabelRun is not runID. It waits until the
// namespaces are gone, with the pods and claims in them that hold
// devices. It returns what it deleted.
func removeLeftovers(ctx context.Context, client kubernetes.Interface, runID string, timeout time.Duration) ([]string, error) {
	leftover := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelRun + "!=" + runID}
	var removed []string
	rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, leftover)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range rules.Items {
		names = append(names, r.Name)
		removed = append(removed, "DeviceTaintRule "+r.Name)
	}
	if err := deleteEach(ctx, "DeviceTaintRule", names, client.ResourceV1().DeviceTaintRules().Delete); err != nil {
		return removed, err
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, leftover)
	if err != nil {
		return removed, err
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp != nil {
			continue
		}
		if err := deleteEach(ctx, "claim", []string{c.Name}, client.ResourceV1().ResourceClaims(c.Namespace).Delete); err != nil {
			return removed, err
		}
		removed = append(removed, "claim "+c.Namespace+"/"+c.Name)
	}
	namespaces, err := client.CoreV1().Namespaces().List(ctx, leftover)
	if err != nil {
		return removed, err
	}
	names = nil
	for _, ns := range namespaces.Items {
		if ns.DeletionTimestamp == nil {
			names = append(names, ns.Name)
			removed = append(removed, "namespace "+ns.Name)
		}
	}
	if err := deleteEach(ctx, "namespace", names, client.CoreV1().Namespaces().Delete); err != nil {
		return removed, err
	}
	err = poll(ctx, timeout, "the namespaces of an earlier run to be deleted", func(ctx context.Context) (string, bool, error) {
		namespaces, err := client.CoreV1().Namespaces().List(ctx, leftover)
		if err != nil {
			return "", false, err
		}
		var left []string
		for _, ns := range namespaces.Items {
			left = append(left, ns.Name)
		}
		return fmt.Sprintf("%v remain", left), len(left) == 0, nil
	})
	return removed, err
}

// request asks for one device of the manifest's class.
func (k *kit) request(name string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: k.m.DeviceClass}}
}

func (k *kit) createClaim(ctx context.Context, name string, requests ...resourceapi.DeviceRequest) error {
	return k.createClaimOf(ctx, name, resourceapi.DeviceClaim{Requests: requests})
}

func (k *kit) createClaimOf(ctx context.Context, name string, devices resourceapi.DeviceClaim) error {
	claim := &resourceapi.ResourceClaim{ObjectMeta: k.meta(name), Spec: resourceapi.ResourceClaimSpec{Devices: devices}}
	if _, err := k.client.ResourceV1().ResourceClaims(k.ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("claim %s: %w", name, err)
	}
	return nil
}

// pod is a proof container using the named claims; mutate adjusts it.
func (k *kit) pod(ctx context.Context, name string, claims []string, mutate func(*v1.Pod)) error {
	c := v1.Container{Name: "proof", Image: k.o.Image, ImagePullPolicy: k.o.PullPolicy}
	if p := k.m.Proof.Command; p != nil {
		c.Command = p.Args
	} else {
		c.Command = []string{"sh", "-c", "env; exec sleep 1000000"}
	}
	pod := &v1.Pod{
		ObjectMeta: k.meta(name),
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			RestartPolicy:                 v1.RestartPolicyNever,
			Containers:                    []v1.Container{c},
		},
	}
	for _, cl := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: cl, ResourceClaimName: ptr.To(cl)})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: cl})
	}
	if mutate != nil {
		mutate(pod)
	}
	_, err := k.client.CoreV1().Pods(k.ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// logSettle is how long the log of a running container must stay the
// same to be all an env proof's container prints: it prints its
// environment at once, then sleeps.
const logSettle = time.Second

// proof waits until the pod runs (or, for a command proof, has run) and
// returns what its container proves: the env variable's value, or the
// command output's match. It fails as soon as the evidence is in: the pod
// failed, or its container's log, final (the container ended) or settled
// (an env proof's), does not prove the device. The error says what the
// pod and its log showed last.
func (k *kit) proof(ctx context.Context, name string) (string, error) {
	return k.proofWith(ctx, name, k.m.Proof)
}

// proofWith is proof with a proof of the manifest's other than its main
// one (a partition's).
func (k *kit) proofWith(ctx context.Context, name string, p manifest.Proof) (string, error) {
	var (
		proven   string
		log      string
		logSince time.Time
	)
	err := poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("pod %s to prove its device", name), func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		ended := pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed || containerEnded(pod)
		if pod.Status.Phase != v1.PodRunning && !ended {
			return state, false, nil
		}
		logs, err := k.client.CoreV1().Pods(k.ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		switch {
		case err != nil && pod.Status.Phase == v1.PodFailed:
			return state, false, settle(fmt.Errorf("pod %s failed: %s; its log: %v", name, state, err))
		case err != nil:
			return state, false, err
		}
		v, err := p.Match(string(logs))
		switch {
		case pod.Status.Phase == v1.PodFailed:
			return state, false, settle(fmt.Errorf("pod %s failed: %s; its log: %s", name, state, proofResult(v, err)))
		case err == nil:
			proven = v
			return state, true, nil
		}
		state += "; its log: " + err.Error()
		if string(logs) != log {
			log, logSince = string(logs), time.Now()
		}
		settled := p.Env != nil && log != "" && time.Since(logSince) >= logSettle
		if ended || settled {
			return state, false, settle(fmt.Errorf("pod %s does not prove its device: %w (pod: %s)", name, err, podState(pod)))
		}
		return state, false, nil
	})
	return proven, err
}

// containerEnded tells whether a container of the pod has terminated:
// its log is then all it will print.
func containerEnded(pod *v1.Pod) bool {
	return slices.ContainsFunc(pod.Status.ContainerStatuses, func(c v1.ContainerStatus) bool { return c.State.Terminated != nil })
}

func proofResult(v string, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("proves %q", v)
}

// podState says why a pod is where it is: its phase, the conditions that
// do not hold, and its containers' waiting reasons.
func podState(pod *v1.Pod) string {
	s := string(pod.Status.Phase)
	if s == "" {
		s = "no phase yet"
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != v1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf("; container %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
		if t := c.State.Terminated; t != nil {
			s += fmt.Sprintf("; container %s terminated: exit code %d %s %s", c.Name, t.ExitCode, t.Reason, t.Message)
		}
	}
	return s
}

// claimResults returns the allocation results of a claim, waiting for it
// to be allocated.
func (k *kit) claimResults(ctx context.Context, name string) ([]resourceapi.DeviceRequestAllocationResult, error) {
	var results []resourceapi.DeviceRequestAllocationResult
	err := poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("claim %s to be allocated", name), func(ctx context.Context) (string, bool, error) {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		if c.Status.Allocation == nil {
			return "not allocated", false, nil
		}
		results = c.Status.Allocation.Devices.Results
		return "", true, nil
	})
	return results, err
}

// oneDevice creates a claim for one device of the class and a pod of the
// same name using it, waits until the pod proves its device, and returns
// the proof, the claim's allocation result and the pod's node.
func (k *kit) oneDevice(ctx context.Context, name string, mutate func(*v1.Pod)) (string, resourceapi.DeviceRequestAllocationResult, string, error) {
	var none resourceapi.DeviceRequestAllocationResult
	if err := k.createClaim(ctx, name, k.request("dev")); err != nil {
		return "", none, "", err
	}
	if err := k.pod(ctx, name, []string{name}, mutate); err != nil {
		return "", none, "", err
	}
	v, err := k.proof(ctx, name)
	if err != nil {
		return "", none, "", err
	}
	results, err := k.claimResults(ctx, name)
	if err != nil {
		return "", none, "", err
	}
	if len(results) != 1 || results[0].Driver != k.m.Driver {
		return "", none, "", fmt.Errorf("claim %s from class %s got %v, want one device of driver %s", name, k.m.DeviceClass, results, k.m.Driver)
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", none, "", err
	}
	return v, results[0], pod.Spec.NodeName, nil
}

func (s *suite) singleDevice(ctx context.Context, logf logFunc, k *kit) error {
	v, got, _, err := k.oneDevice(ctx, "one", nil)
	if err != nil {
		return err
	}
	logf("pod one got %s/%s and proves %q", got.Pool, got.Device, v)
	return nil
}

func (s *suite) sharedClaim(ctx context.Context, logf logFunc, k *kit) error {
	if err := k.createClaim(ctx, "shared", k.request("dev")); err != nil {
		return err
	}
	var proofs []string
	for _, name := range []string{"first", "second"} {
		if err := k.pod(ctx, name, []string{"shared"}, nil); err != nil {
			return err
		}
		v, err := k.proof(ctx, name)
		if err != nil {
			return err
		}
		proofs = append(proofs, v)
	}
	if proofs[0] != proofs[1] {
		return fmt.Errorf("two pods sharing one claim prove different devices: %q and %q", proofs[0], proofs[1])
	}
	claim, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n := len(claim.Status.ReservedFor); n != 2 {
		return fmt.Errorf("the shared claim is reserved for %d pods, want 2", n)
	}
	logf("both pods prove %q", proofs[0])
	return nil
}

// prioritizedList asks for the manifest's classes in order: the result must
// be the first class that still has a free device.
func (s *suite) prioritizedList(ctx context.Context, logf logFunc, k *kit) error {
	free, err := freeDevices(ctx, k.client, s.m.Driver)
	if err != nil {
		return err
	}
	want := -1
	var subrequests []resourceapi.DeviceSubRequest
	for i, class := range s.m.PrioritizedClasses {
		subrequests = append(subrequests, resourceapi.DeviceSubRequest{Name: fmt.Sprintf("c%d", i), DeviceClassName: class})
		if want >= 0 {
			continue
		}
		n, err := matching(ctx, k.client, class, free)
		if err != nil {
			return fmt.Errorf("the manifest's prioritizedClasses: %w", err)
		}
		if n > 0 {
			want = i
		}
	}
	if want < 0 {
		return fmt.Errorf("no free device matches any of the classes %v: the check needs one", s.m.PrioritizedClasses)
	}
	if err := k.createClaim(ctx, "prio", resourceapi.DeviceRequest{Name: "dev", FirstAvailable: subrequests}); err != nil {
		return err
	}
	if err := k.pod(ctx, "prio", []string{"prio"}, nil); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "prio"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "prio")
	if err != nil {
		return err
	}
	wantRequest := fmt.Sprintf("dev/c%d", want)
	if len(results) != 1 || results[0].Request != wantRequest {
		return fmt.Errorf("the claim got %v, want request %s (class %s, the first with a free device)", results, wantRequest, s.m.PrioritizedClasses[want])
	}
	logf("prioritized list chose %s (%s): %s/%s", wantRequest, s.m.PrioritizedClasses[want], results[0].Pool, results[0].Device)
	return nil
}

// adminAccess: a claim with admin access gets every device of a node, the
// one a workload uses included, and the workload keeps running. The
// workload runs on a node whose devices of the class are plain where the
// driver has one: on the conformance lab, an admin claim for every device
// of the MIG node, and one of the shared node, beside a workload there
// stayed unschedulable ("cannot allocate all claims"), the allocator
// apparently counting the admin claim's counters or capacity, which the
// workload holds already.
func (s *suite) adminAccess(ctx context.Context, logf logFunc, k *kit) error {
	plain, err := k.plainNodes(ctx)
	if err != nil {
		return err
	}
	_, used, node, err := k.oneDevice(ctx, "work", onNodes(plain))
	if err != nil {
		return err
	}
	req, err := k.everyDeviceWith(ctx, "all", node, used)
	if err != nil {
		return err
	}
	req.Exactly.AdminAccess = ptr.To(true)
	if err := k.createClaim(ctx, "admin", req); err != nil {
		return err
	}
	if err := k.pod(ctx, "admin", []string{"admin"}, func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "admin"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "admin")
	if err != nil {
		return err
	}
	found := slices.ContainsFunc(results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Pool == used.Pool && r.Device == used.Device && r.AdminAccess != nil && *r.AdminAccess
	})
	if !found {
		return fmt.Errorf("the admin claim got %v, want the in-use device %s/%s among them with admin access", results, used.Pool, used.Device)
	}
	if _, err := k.proof(ctx, "work"); err != nil {
		return fmt.Errorf("the workload after the admin pod started: %w", err)
	}
	logf("admin claim holds %d devices of node %s%s, %s/%s in use by the workload among them", len(results), node, selectorNote(req), used.Pool, used.Device)
	return nil
}

// deviceTaints: a device tainted NoSchedule is not allocated, and is once
// the taint is gone. The check taints only a device it was allocated
// itself, named by driver, pool and device: a claim of the class gets it,
// the rule taints it, the claim goes. A claim for every device of the
// class on that node (CEL cannot name a device) must then stay
// unallocated, and be allocated, that device among its results, once the
// rule is deleted: the rule, on that one device, is what changed.
func (s *suite) deviceTaints(ctx context.Context, logf logFunc, k *kit) error {
	_, own, node, err := k.oneDevice(ctx, "probe", nil)
	if err != nil {
		return err
	}
	// Before the rule: a node whose devices a claim cannot all hold may
	// make the check skip.
	every, err := k.everyDeviceWith(ctx, "every", node, own)
	if err != nil {
		return err
	}
	rule := k.taintRule(own)
	if _, err := k.client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("DeviceTaintRule %s: %w", rule.Name, err)
	}
	k.rules = append(k.rules, rule.Name)
	device := own.Driver + "/" + own.Pool + "/" + own.Device
	logf("tainted %s on node %s, the device claim probe got", device, node)
	if err := k.remove(ctx, []string{"probe"}, []string{"probe"}); err != nil {
		return fmt.Errorf("freeing %s: %w", device, err)
	}

	if err := k.createClaim(ctx, "every", every); err != nil {
		return err
	}
	if err := k.pod(ctx, "every", []string{"every"}, func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}); err != nil {
		return err
	}
	err = poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("the scheduler to find the pod claiming every device of node %s unschedulable while %s is tainted", node, device), func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "every", metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		if pod.Spec.NodeName != "" {
			return state, false, settle(fmt.Errorf("the pod claiming every device of node %s was scheduled while %s was tainted NoSchedule (pod: %s)", node, device, state))
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return state, true, nil
			}
		}
		return state, false, nil
	})
	if err != nil {
		return err
	}
	if err := deleteEach(ctx, "DeviceTaintRule", []string{rule.Name}, k.client.ResourceV1().DeviceTaintRules().Delete); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "every"); err != nil {
		return fmt.Errorf("after the taint on %s was removed: %w", device, err)
	}
	got, err := k.claimResults(ctx, "every")
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(got, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == own.Driver && r.Pool == own.Pool && r.Device == own.Device
	}) {
		return fmt.Errorf("after the taint was removed, the claim for every device of node %s got %v, without %s", node, got, device)
	}
	logf("while %s was tainted, a claim for all %d devices of node %s%s stayed unallocated; untainted, it got them", device, len(got), node, selectorNote(every))
	return nil
}

// selectorNote says, for a message, which devices of a node a request for
// all of them narrows to.
func selectorNote(req resourceapi.DeviceRequest) string {
	if req.Exactly == nil || len(req.Exactly.Selectors) == 0 {
		return ""
	}
	return fmt.Sprintf(" with %s (a claim may hold %d)", req.Exactly.Selectors[0].CEL.Expression, claimLimit)
}

// taintRule taints exactly one device: its selector names the device's
// driver, pool and name.
func (k *kit) taintRule(d resourceapi.DeviceRequestAllocationResult) *resourceapi.DeviceTaintRule {
	return &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: k.ns, Labels: k.labels()},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(d.Driver), Pool: ptr.To(d.Pool), Device: ptr.To(d.Device)},
			Taint:          resourceapi.DeviceTaint{Key: TaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}
}

// extendedResource: a pod asking for the class's extended resource gets a
// device through a claim the scheduler makes for it.
func (s *suite) extendedResource(ctx context.Context, logf logFunc, k *kit) error {
	name := v1.ResourceName(s.m.ExtendedResource())
	if err := k.pod(ctx, "counted", nil, func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{name: resource.MustParse("1")}
	}); err != nil {
		return err
	}
	v, err := k.proof(ctx, "counted")
	if err != nil {
		return err
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "counted", metav1.GetOptions{})
	if err != nil {
		return err
	}
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		return fmt.Errorf("the pod runs but its status names no claim for %s", name)
	}
	logf("pod asking for %s got claim %s and proves %q", name, st.ResourceClaimName, v)
	return nil
}

// opaqueConfig: a claim configured with the manifest's valid parameters
// runs; one with its invalid parameters is allocated and bound, and the
// kubelet reports that the driver refused to prepare it. The check passes
// on that report, never on a pod that has merely not started yet.
func (s *suite) opaqueConfig(ctx context.Context, logf logFunc, k *kit) error {
	configured := func(name string, params []byte) error {
		err := k.createClaimOf(ctx, name, resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{k.request("dev")},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"dev"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: s.m.Driver, Parameters: runtime.RawExtension{Raw: params}}}}},
		})
		if err != nil {
			return err
		}
		return k.pod(ctx, name, []string{name}, nil)
	}
	if err := configured("valid", s.m.OpaqueConfig.Valid); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "valid"); err != nil {
		return fmt.Errorf("with the valid configuration: %w", err)
	}
	if err := configured("invalid", s.m.OpaqueConfig.Invalid); err != nil {
		return err
	}
	refused, err := k.preparationRefused(ctx, "invalid")
	if err != nil {
		return fmt.Errorf("the invalid configuration %s: %w", s.m.OpaqueConfig.Invalid, err)
	}
	logf("invalid configuration refused: the kubelet reports %q", refused)
	return nil
}

// preparationRefused waits for the kubelet's report that it could not
// prepare a pod's claims, its FailedPrepareDynamicResources event, and
// returns the event's message, which carries the driver's error. It fails
// if the pod runs.
func (k *kit) preparationRefused(ctx context.Context, name string) (string, error) {
	var refused string
	what := fmt.Sprintf("the kubelet's %s event for pod %s, the evidence that the driver refused to prepare its claim", kubeletPrepareFailed, name)
	err := poll(ctx, k.m.Timeouts.PodRunning, what, func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		state := podState(pod)
		if pod.Status.Phase == v1.PodRunning || pod.Status.Phase == v1.PodSucceeded {
			return state, false, settle(fmt.Errorf("pod %s runs (%s): the driver prepared its claim", name, state))
		}
		events, err := k.client.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=" + kubeletPrepareFailed,
		})
		if err != nil {
			return state, false, err
		}
		for _, e := range events.Items {
			if e.Reason == kubeletPrepareFailed && e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name && e.InvolvedObject.UID == pod.UID {
				refused = e.Message
				return state, true, nil
			}
		}
		return state + "; no " + kubeletPrepareFailed + " event", false, nil
	})
	return refused, err
}

// kubeletPrepareFailed is the reason of the kubelet's event for a pod
// whose claims a driver failed to prepare.
const kubeletPrepareFailed = "FailedPrepareDynamicResources"
