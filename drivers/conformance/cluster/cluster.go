// Package cluster is layer 2 of dralab's DRA driver conformance suite:
// e2e-framework features that check, on a running cluster, what a driver's
// manifest says it supports. Device counts and attributes are discovered
// from the driver's ResourceSlices, never declared. A feature whose
// capability the manifest does not enable is skipped, saying so.
//
// A driver author's own e2e-framework suite can run them:
//
//	testenv.Test(t, cluster.Features(m, cluster.Options{})...)
package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/internal/devicecel"
)

// Options tune the features to the cluster.
type Options struct {
	// Image runs the proof containers; it must have sh and env. Empty:
	// busybox.
	Image string
	// PullPolicy of the proof containers; empty: IfNotPresent.
	PullPolicy v1.PullPolicy
}

// LabelCapability labels each feature with the capability it checks
// ("core" for what every driver must do), for --labels.
const LabelCapability = "capability"

// Features returns one feature per check of the manifest's driver.
func Features(m *manifest.Manifest, o Options) []features.Feature {
	if o.Image == "" {
		o.Image = "busybox:1.37"
	}
	if o.PullPolicy == "" {
		o.PullPolicy = v1.PullIfNotPresent
	}
	s := &suite{m: m, o: o}
	out := []features.Feature{
		s.feature("single device", "", "a pod with a claim of the class runs and proves its device", s.singleDevice),
		s.feature("shared claim", manifest.SharedClaims, "two pods sharing one claim prove the same device", s.sharedClaim),
		s.feature("prioritized list", manifest.DRAPrioritizedList, "the first class with a free device is chosen", s.prioritizedList),
		s.feature("admin access", manifest.DRAAdminAccess, "an admin claim gets an in-use device, the workload keeps it", s.adminAccess),
		s.feature("device taints", manifest.DRADeviceTaints, "tainted devices are not allocated until untainted", s.deviceTaints),
		s.feature("extended resource", manifest.DRAExtendedResource, "a pod asking for the extended resource gets a device", s.extendedResource),
		s.feature("opaque config", manifest.OpaqueConfig, "valid configuration is prepared, invalid configuration fails preparation", s.opaqueConfig),
	}
	for _, c := range []manifest.Capability{manifest.DRAPartitionableDevices, manifest.DRAConsumableCapacity,
		manifest.DRADeviceBindingConditions, manifest.DRAResourceClaimDeviceStatus} {
		out = append(out, s.feature(string(c), c, "declared", nil))
	}
	return out
}

type suite struct {
	m *manifest.Manifest
	o Options
}

type check func(ctx context.Context, t *testing.T, k *kit) error

// feature wraps a check: skipped when its capability is off, run in a
// namespace of its own that is deleted afterwards.
func (s *suite) feature(name string, capability manifest.Capability, rule string, c check) features.Feature {
	label := string(capability)
	if label == "" {
		label = "core"
	}
	return features.New(name).WithLabel(LabelCapability, label).
		Assess(rule, func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if capability != "" && !s.m.Enabled(capability) {
				t.Skipf("the manifest does not enable %s", capability)
			}
			if c == nil {
				t.Skipf("%s is enabled, but this suite has no check for it yet: it is not verified", capability)
			}
			client, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			k := &kit{suite: s, client: client, ns: "conformance-" + rand.String(5)}
			if err := k.createNamespace(ctx, capability == manifest.DRAAdminAccess); err != nil {
				t.Fatal(err)
			}
			defer k.cleanup(ctx, t)
			if err := c(ctx, t, k); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return ctx
		}).Feature()
}

// kit is what a check works with.
type kit struct {
	*suite
	client kubernetes.Interface
	ns     string
	// rules are the DeviceTaintRules the check created.
	rules []string
}

func (k *kit) createNamespace(ctx context.Context, adminAccess bool) error {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}
	if adminAccess {
		// Only namespaces labelled so may hold claims with admin access.
		ns.Labels = map[string]string{"resource.kubernetes.io/admin-access": "true"}
	}
	_, err := k.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	return err
}

func (k *kit) cleanup(ctx context.Context, t *testing.T) {
	ctx = context.WithoutCancel(ctx)
	for _, r := range k.rules {
		_ = k.client.ResourceV1().DeviceTaintRules().Delete(ctx, r, metav1.DeleteOptions{})
	}
	_ = k.client.CoreV1().Pods(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	// Claims go once their pods are gone and the driver has unprepared
	// them; wait, so that the next check finds the devices free.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, k.m.Timeouts.PodRunning, true, func(ctx context.Context) (bool, error) {
		pods, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 {
			return false, nil
		}
		_ = k.client.ResourceV1().ResourceClaims(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		claims, err := k.client.ResourceV1().ResourceClaims(k.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("cleanup: pods or claims of %s remain: %v", k.ns, err)
	}
	_ = k.client.CoreV1().Namespaces().Delete(ctx, k.ns, metav1.DeleteOptions{})
}

// request asks for one device of the manifest's class.
func (k *kit) request(name string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: k.m.DeviceClass}}
}

func (k *kit) createClaim(ctx context.Context, name string, requests ...resourceapi.DeviceRequest) error {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}
	_, err := k.client.ResourceV1().ResourceClaims(k.ns).Create(ctx, claim, metav1.CreateOptions{})
	return err
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
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
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

// proof waits until the pod runs (or, for a command proof, has run) and
// returns what its container proves: the env variable's value, or the
// command output's match.
func (k *kit) proof(ctx context.Context, name string) (string, error) {
	var (
		last    string
		lastErr error
	)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, k.m.Timeouts.PodRunning, true, func(ctx context.Context) (bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = podState(pod)
		if pod.Status.Phase == v1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s", name, last)
		}
		if pod.Status.Phase != v1.PodRunning && pod.Status.Phase != v1.PodSucceeded {
			return false, nil
		}
		logs, err := k.client.CoreV1().Pods(k.ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		_, err = k.m.Proof.Match(string(logs))
		lastErr = err
		return err == nil, nil
	})
	if err != nil {
		if lastErr != nil {
			return "", fmt.Errorf("pod %s (%s) did not prove its device within %v: %w", name, last, k.m.Timeouts.PodRunning, lastErr)
		}
		return "", fmt.Errorf("pod %s did not run within %v: %s", name, k.m.Timeouts.PodRunning, last)
	}
	logs, err := k.client.CoreV1().Pods(k.ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	return k.m.Proof.Match(string(logs))
}

// podState says why a pod is where it is: its phase, the conditions that
// do not hold, and its containers' waiting reasons.
func podState(pod *v1.Pod) string {
	s := string(pod.Status.Phase)
	for _, c := range pod.Status.Conditions {
		if c.Status != v1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf("; container %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
	}
	return s
}

// claimResults returns the allocation results of a claim, waiting for it
// to be allocated.
func (k *kit) claimResults(ctx context.Context, name string) ([]resourceapi.DeviceRequestAllocationResult, error) {
	var results []resourceapi.DeviceRequestAllocationResult
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, k.m.Timeouts.PodRunning, true, func(ctx context.Context) (bool, error) {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil {
			return false, nil
		}
		results = c.Status.Allocation.Devices.Results
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s was not allocated within %v", name, k.m.Timeouts.PodRunning)
	}
	return results, nil
}

func (s *suite) singleDevice(ctx context.Context, t *testing.T, k *kit) error {
	if err := k.createClaim(ctx, "one", k.request("dev")); err != nil {
		return err
	}
	if err := k.pod(ctx, "one", []string{"one"}, nil); err != nil {
		return err
	}
	v, err := k.proof(ctx, "one")
	if err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "one")
	if err != nil {
		return err
	}
	if len(results) != 1 || results[0].Driver != s.m.Driver {
		return fmt.Errorf("claim one from class %s got %v, want one device of driver %s", s.m.DeviceClass, results, s.m.Driver)
	}
	t.Logf("pod one got %s/%s and proves %q", results[0].Pool, results[0].Device, v)
	return nil
}

func (s *suite) sharedClaim(ctx context.Context, t *testing.T, k *kit) error {
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
	t.Logf("both pods prove %q", proofs[0])
	return nil
}

// prioritizedList asks for the manifest's classes in order: the result must
// be the first class that still has a free device.
func (s *suite) prioritizedList(ctx context.Context, t *testing.T, k *kit) error {
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
			return err
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
	t.Logf("prioritized list chose %s (%s): %s/%s", wantRequest, s.m.PrioritizedClasses[want], results[0].Pool, results[0].Device)
	return nil
}

// adminAccess: a claim with admin access gets every device of a node, the
// one a workload uses included, and the workload keeps running.
func (s *suite) adminAccess(ctx context.Context, t *testing.T, k *kit) error {
	if err := k.createClaim(ctx, "work", k.request("dev")); err != nil {
		return err
	}
	if err := k.pod(ctx, "work", []string{"work"}, nil); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "work"); err != nil {
		return err
	}
	used, err := k.claimResults(ctx, "work")
	if err != nil {
		return err
	}
	work, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "work", metav1.GetOptions{})
	if err != nil {
		return err
	}
	req := k.request("all")
	req.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	req.Exactly.AdminAccess = ptr.To(true)
	if err := k.createClaim(ctx, "admin", req); err != nil {
		return err
	}
	if err := k.pod(ctx, "admin", []string{"admin"}, func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": work.Spec.NodeName}
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
		return r.Pool == used[0].Pool && r.Device == used[0].Device && r.AdminAccess != nil && *r.AdminAccess
	})
	if !found {
		return fmt.Errorf("the admin claim got %v, want the in-use device %s/%s among them with admin access", results, used[0].Pool, used[0].Device)
	}
	if _, err := k.proof(ctx, "work"); err != nil {
		return fmt.Errorf("the workload after the admin pod started: %w", err)
	}
	t.Logf("admin claim holds %d devices of node %s, %s/%s in use by the workload among them", len(results), work.Spec.NodeName, used[0].Pool, used[0].Device)
	return nil
}

// deviceTaints: with every device of the driver tainted NoSchedule, a
// claim stays unallocated; once the taint is gone, the pod runs.
func (s *suite) deviceTaints(ctx context.Context, t *testing.T, k *kit) error {
	rule := &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: k.ns},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(s.m.Driver)},
			Taint:          resourceapi.DeviceTaint{Key: "conformance.dralab.dev/tainted", Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}
	if _, err := k.client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		return err
	}
	k.rules = append(k.rules, rule.Name)
	if err := k.createClaim(ctx, "tainted", k.request("dev")); err != nil {
		return err
	}
	if err := k.pod(ctx, "tainted", []string{"tainted"}, nil); err != nil {
		return err
	}
	// The scheduler tries and fails: the pod is marked unschedulable.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, k.m.Timeouts.PodRunning, true, func(ctx context.Context) (bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "tainted", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("the pod was scheduled to %s while every device of %s was tainted NoSchedule", pod.Spec.NodeName, s.m.Driver)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the tainted devices to be refused: %w", err)
	}
	if err := k.client.ResourceV1().DeviceTaintRules().Delete(ctx, rule.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "tainted"); err != nil {
		return fmt.Errorf("after the taint was removed: %w", err)
	}
	return nil
}

// extendedResource: a pod asking for the class's extended resource gets a
// device through a claim the scheduler makes for it.
func (s *suite) extendedResource(ctx context.Context, t *testing.T, k *kit) error {
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
	t.Logf("pod asking for %s got claim %s and proves %q", name, st.ResourceClaimName, v)
	return nil
}

// opaqueConfig: a claim configured with the manifest's valid parameters
// runs; one with its invalid parameters is allocated but never runs, the
// kubelet reporting that the driver refused to prepare it.
func (s *suite) opaqueConfig(ctx context.Context, t *testing.T, k *kit) error {
	configured := func(name string, params []byte) error {
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{k.request("dev")},
				Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"dev"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
					Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: s.m.Driver, Parameters: runtime.RawExtension{Raw: params}}}}},
			}},
		}
		if _, err := k.client.ResourceV1().ResourceClaims(k.ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("claim %s: %w", name, err)
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
	// The kubelet reports a failed preparation as an event; where its
	// events are not recorded (the embedded lab's hollow nodes), the pod,
	// allocated and bound, must still not have started after a grace.
	const grace = 10 * time.Second
	var refused string
	var boundAt time.Time
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, k.m.Timeouts.PodRunning, true, func(ctx context.Context) (bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "invalid", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Status.Phase == v1.PodRunning || pod.Status.Phase == v1.PodSucceeded {
			return false, fmt.Errorf("the pod with the invalid configuration runs: the driver prepared %s", s.m.OpaqueConfig.Invalid)
		}
		events, err := k.client.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=invalid,reason=FailedPrepareDynamicResources"})
		if err == nil && len(events.Items) > 0 {
			refused = "the kubelet reports: " + events.Items[0].Message
			return true, nil
		}
		if pod.Spec.NodeName == "" {
			return false, nil
		}
		if boundAt.IsZero() {
			boundAt = time.Now()
		}
		if time.Since(boundAt) >= grace {
			refused = fmt.Sprintf("the pod is bound to %s and still %s after %v (no kubelet event recorded)", pod.Spec.NodeName, podState(pod), grace)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the invalid configuration: %w", err)
	}
	t.Logf("invalid configuration refused: %s", refused)
	return nil
}

// device is a published device with its pool.
type device struct {
	driver, pool string
	dev          resourceapi.Device
}

// freeDevices lists the driver's devices that no claim holds.
func freeDevices(ctx context.Context, client kubernetes.Interface, driver string) ([]device, error) {
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
	if err != nil {
		return nil, err
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == driver && (r.AdminAccess == nil || !*r.AdminAccess) {
				held[r.Pool+"/"+r.Device] = true
			}
		}
	}
	var out []device
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if !held[s.Spec.Pool.Name+"/"+d.Name] {
				out = append(out, device{driver: s.Spec.Driver, pool: s.Spec.Pool.Name, dev: d})
			}
		}
	}
	return out, nil
}

// matching counts the devices a class selects, evaluating its CEL
// selectors with the allocator's own library.
func matching(ctx context.Context, client kubernetes.Interface, className string, devs []device) (int, error) {
	class, err := client.ResourceV1().DeviceClasses().Get(ctx, className, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("DeviceClass %s of the manifest's prioritizedClasses does not exist", className)
	} else if err != nil {
		return 0, err
	}
	var expressions []string
	for _, sel := range class.Spec.Selectors {
		if sel.CEL != nil {
			expressions = append(expressions, sel.CEL.Expression)
		}
	}
	selectors, err := devicecel.Compile(expressions...)
	if err != nil {
		return 0, fmt.Errorf("DeviceClass %s: %w", className, err)
	}
	n := 0
	for _, d := range devs {
		// A device whose evaluation fails is one the allocator skips.
		if ok, _ := selectors.Match(ctx, cel.Device{Driver: d.driver, Attributes: d.dev.Attributes, Capacity: d.dev.Capacity}); ok {
			n++
		}
	}
	return n, nil
}
