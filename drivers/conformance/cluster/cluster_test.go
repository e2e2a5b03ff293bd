package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
)

// The device-taints check taints one device, one it was allocated itself,
// named by driver, pool and device; it shows that device refused while
// tainted and allocated once the rule is gone; the rule does not outlive
// the check.
func TestDeviceTaintsTaintsOnlyTheDeviceItWasAllocated(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	ctx := context.Background()
	if err := k.deviceTaints(ctx, t.Logf, k); err != nil {
		t.Fatal(err)
	}
	if err := k.cleanup(ctx); err != nil {
		t.Error(err)
	}
	rules := f.createdRules()
	if len(rules) != 1 {
		t.Fatalf("the check created %d DeviceTaintRules, want 1", len(rules))
	}
	for _, r := range rules {
		sel := r.rule.Spec.DeviceSelector
		if sel == nil || sel.Driver == nil || sel.Pool == nil || sel.Device == nil {
			t.Fatalf("DeviceTaintRule %s selects %+v: want one device, named by driver, pool and device", r.rule.Name, sel)
		}
		device := *sel.Driver + "/" + *sel.Pool + "/" + *sel.Device
		if !r.allocatedBefore[device] {
			t.Errorf("DeviceTaintRule %s taints %s, which the check had not been allocated (allocated before: %v)", r.rule.Name, device, r.allocatedBefore)
		}
		if _, err := f.client.ResourceV1().DeviceTaintRules().Get(ctx, r.rule.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DeviceTaintRule %s outlives the check: %v", r.rule.Name, err)
		}
	}
}

// A scheduler that allocates a tainted device is the cluster not
// enforcing DeviceTaintRules, not the driver ignoring them: the check is
// not verified, and says so.
func TestDeviceTaintsNotEnforcedIsTheClusters(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	ctx := context.Background()
	f.ignoreTaints.Store(true)
	err := k.deviceTaints(ctx, t.Logf, k)
	var skip skipCheck
	if !errors.As(err, &skip) || !strings.Contains(err.Error(), "the cluster does not enforce DeviceTaintRules") {
		t.Fatalf("got %v, want the check not verified: the cluster does not enforce DeviceTaintRules", err)
	}
	if status, msg := k.verdict("device taints", err); status != results.Failed || !strings.HasPrefix(msg, results.UnverifiedPrefix) {
		t.Errorf("verdict %s %q; want failed as not verified", status, msg)
	}
	if err := k.cleanup(ctx); err != nil {
		t.Error(err)
	}
	if rules, err := k.client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{}); err != nil || len(rules.Items) > 0 {
		t.Errorf("after the check failed, DeviceTaintRules remain: %v, %v", rules, err)
	}
}

// The opaque-config check passes only on the kubelet's report that the
// driver refused the invalid configuration, and fails when the pod runs or
// when no such report comes, however long the pod has been waiting.
func TestOpaqueConfigPassesOnlyOnEvidence(t *testing.T) {
	for _, tc := range []struct {
		refuse string
		// timeout of the check, beyond the 10 s after which the pod
		// was once taken as refused.
		timeout time.Duration
		wantErr string
	}{
		{refuse: refuseWithEvent},
		{refuse: prepareAnyway, wantErr: "runs"},
		{refuse: refuseSilently, timeout: 11 * time.Second, wantErr: "FailedPrepareDynamicResources event for pod invalid"},
	} {
		t.Run(tc.refuse, func(t *testing.T) {
			_, k := newFakeCluster(t, tc.refuse)
			if tc.timeout > 0 {
				k.m.Timeouts.PodRunning = tc.timeout
			}
			err := k.opaqueConfig(context.Background(), t.Logf, k)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

// Every namespace, claim, pod and DeviceTaintRule a check creates carries
// the suite's labels, and the cleanup removes them all, also after a check
// that ended with its context cancelled.
func TestCreatedObjectsAreLabelledAndRemoved(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	ctx, cancel := context.WithCancel(context.Background())
	// The device-taints check creates a claim, a pod and a rule and
	// leaves a pod and its claim, allocated, for the cleanup.
	if err := k.deviceTaints(ctx, t.Logf, k); err != nil {
		t.Fatal(err)
	}
	for _, r := range f.createdRules() {
		wantSuiteLabels(t, "DeviceTaintRule "+r.rule.Name, r.rule.Labels)
	}
	ns, err := f.client.CoreV1().Namespaces().Get(ctx, k.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantSuiteLabels(t, "namespace "+ns.Name, ns.Labels)
	claims, err := f.client.ResourceV1().ResourceClaims(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) == 0 {
		t.Fatalf("claims: %v, %v", claims, err)
	}
	for _, c := range claims.Items {
		wantSuiteLabels(t, "claim "+c.Name, c.Labels)
	}
	pods, err := f.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	for _, p := range pods.Items {
		wantSuiteLabels(t, "pod "+p.Name, p.Labels)
	}

	// A rule of a check that then ended with its context.
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}
	if _, err := f.client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.rules = append(k.rules, rule.Name)
	cancel()
	if err := k.cleanup(ctx); err != nil {
		t.Error(err)
	}
	bg := context.Background()
	if rules, err := f.client.ResourceV1().DeviceTaintRules().List(bg, metav1.ListOptions{}); err != nil || len(rules.Items) > 0 {
		t.Errorf("DeviceTaintRules remain: %v, %v", rules, err)
	}
	if pods, err := f.client.CoreV1().Pods(k.ns).List(bg, metav1.ListOptions{}); err != nil || len(pods.Items) > 0 {
		t.Errorf("pods remain: %v, %v", pods, err)
	}
	if claims, err := f.client.ResourceV1().ResourceClaims(k.ns).List(bg, metav1.ListOptions{}); err != nil || len(claims.Items) > 0 {
		t.Errorf("claims remain: %v, %v", claims, err)
	}
	if _, err := f.client.CoreV1().Namespaces().Get(bg, k.ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s remains: %v", k.ns, err)
	}
}

func wantSuiteLabels(t *testing.T, what string, labels map[string]string) {
	t.Helper()
	if labels["app.kubernetes.io/managed-by"] != "dralab-conformance" {
		t.Errorf("%s is not labelled app.kubernetes.io/managed-by=dralab-conformance: %v", what, labels)
	}
	if _, ok := labels["conformance.dralab.dev/run"]; !ok {
		t.Errorf("%s has no conformance.dralab.dev/run label: %v", what, labels)
	}
}

// beyondClaimLimit is a node with more devices than one claim may hold
// (40, as a big node has), one without attributes: a selector reading an
// attribute it lacks would fail the whole allocation.
func beyondClaimLimit() []resourceapi.Device {
	devs := fakeDevices(40, true)
	devs[len(devs)-1].Attributes = nil
	return devs
}

// claimOf returns a claim of the check's namespace.
func claimOf(t *testing.T, k *kit, name string) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// On a node with more devices than a claim may hold, the admin claim is
// narrowed by the in-use device's attributes to a group within the limit
// that holds it, and gets that device.
func TestAdminAccessBeyondTheClaimLimit(t *testing.T) {
	_, k := newFakeClusterOf(t, refuseWithEvent, beyondClaimLimit())
	ctx := context.Background()
	if err := k.adminAccess(ctx, t.Logf, k); err != nil {
		t.Fatal(err)
	}
	work, admin := claimOf(t, k, "work"), claimOf(t, k, "admin")
	used := work.Status.Allocation.Devices.Results[0]
	got := admin.Status.Allocation.Devices.Results
	if n := len(got); n == 0 || n > resourceapi.AllocationResultsMaxSize {
		t.Errorf("the admin claim got %d devices, want 1 to %d", n, resourceapi.AllocationResultsMaxSize)
	}
	if !slices.ContainsFunc(got, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Device == used.Device }) {
		t.Errorf("the admin claim got %v, without the workload's %s", got, used.Device)
	}
	t.Logf("admin claim: %d devices, selectors %v", len(got), admin.Spec.Devices.Requests[0].Exactly.Selectors)
	if err := k.cleanup(ctx); err != nil {
		t.Error(err)
	}
}

// The device-taints check works on such a node too: its claim for every
// device is narrowed to a group that holds the tainted device.
func TestDeviceTaintsBeyondTheClaimLimit(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, beyondClaimLimit())
	ctx := context.Background()
	if err := k.deviceTaints(ctx, t.Logf, k); err != nil {
		t.Fatal(err)
	}
	rules := f.createdRules()
	if len(rules) != 1 {
		t.Fatalf("%d DeviceTaintRules, want 1", len(rules))
	}
	tainted := *rules[0].rule.Spec.DeviceSelector.Device
	every := claimOf(t, k, "every")
	got := every.Status.Allocation.Devices.Results
	if n := len(got); n < 2 || n > resourceapi.AllocationResultsMaxSize {
		t.Errorf("the claim for every device got %d, want a group of 2 to %d", n, resourceapi.AllocationResultsMaxSize)
	}
	if !slices.ContainsFunc(got, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Device == tainted }) {
		t.Errorf("the claim for every device got %v, without the tainted %s", got, tainted)
	}
	if err := k.cleanup(ctx); err != nil {
		t.Error(err)
	}
}

// Devices no attribute tells apart cannot be narrowed: the check says why
// it cannot be made rather than ask for what no claim may hold, and the
// feature fails as not verified, or is skipped with the reason when the
// caller allows unverified checks. It never passes.
func TestClaimOfEveryDeviceUnverifiedWhenAttributesCannotNarrow(t *testing.T) {
	_, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(40, false))
	err := k.adminAccess(context.Background(), t.Logf, k)
	var skip skipCheck
	if !errors.As(err, &skip) || !strings.Contains(err.Error(), "has 40 devices of class gpu.example.com, more than a claim may hold (32)") {
		t.Fatalf("got %v, want a check not made, naming the 40 devices and the limit of 32", err)
	}
	if err := k.cleanup(context.Background()); err != nil {
		t.Error(err)
	}
	for _, allow := range []bool{false, true} {
		s := newSuite(k.m, Options{AllowUnverified: allow})
		status, msg := s.verdict("admin access", err)
		want := results.Failed
		if allow {
			want = results.Skipped
		}
		if status != want || !strings.HasPrefix(msg, "not verified: admin access: node ") {
			t.Errorf("AllowUnverified=%v: %s %q, want %s, not verified, naming the feature", allow, status, msg, want)
		}
	}
	s := newSuite(k.m, Options{})
	if status, msg := s.verdict("admin access", errors.New("boom")); status != results.Failed || msg != "admin access: boom" {
		t.Errorf("a failing check: %s %q", status, msg)
	}
	if status, _ := s.verdict("admin access", nil); status != results.Passed {
		t.Errorf("a check that passed: %s", status)
	}
}

// A proof fails as soon as the container's log disproves it, with what the
// pod and the log showed, rather than when the pod-running timeout ends.
func TestProofFailsOnceTheLogIsIn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proof string
		phase v1.PodPhase
		want  []string
	}{{
		name:  "env printed, container running",
		proof: `env: {name: GPU_DEVICE_0, pattern: "^gpu-[0-9]+$"}`,
		phase: v1.PodRunning,
		want:  []string{"pod one does not prove its device: GPU_DEVICE_0=\"cpu\" does not match", "(pod: Running"},
	}, {
		name:  "command exited",
		proof: `command: {args: [nvidia-smi, -L], pattern: "GPU 0: "}`,
		phase: v1.PodSucceeded,
		want:  []string{"pod one does not prove its device: the output of [nvidia-smi -L] does not match", "(pod: Succeeded"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, k := newFakeCluster(t, refuseWithEvent)
			withProof(t, k, tc.proof)
			k.m.Timeouts.PodRunning = 30 * time.Second
			f.mu.Lock()
			f.phase = tc.phase
			f.mu.Unlock()
			f.setLog(func(int) string { return "PATH=/bin\nGPU_DEVICE_0=cpu\n" })
			start := time.Now()
			err := k.singleDevice(context.Background(), t.Logf, k)
			took := time.Since(start)
			if err == nil {
				t.Fatal("a log without the proof passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if took > 5*time.Second {
				t.Errorf("failed after %v, want within seconds of the log being there (the pod-running timeout is %v)", took.Round(time.Millisecond), k.m.Timeouts.PodRunning)
			}
			if err := k.cleanup(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
}

// A log still being written is not judged: an environment printed in two
// pieces proves the device.
func TestProofWaitsForALogStillGrowing(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	f.setLog(func(n int) string {
		if n < 4 {
			return "PATH=/bin\n"
		}
		return "PATH=/bin\nGPU_DEVICE_0=gpu-0\n"
	})
	if err := k.singleDevice(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
	if err := k.cleanup(context.Background()); err != nil {
		t.Error(err)
	}
}

// withProof gives the check's manifest another proof.
func withProof(t *testing.T, k *kit, proof string) {
	t.Helper()
	m, err := manifest.Parse("test", []byte(strings.Replace(testManifest, `env: {name: GPU_DEVICE_0, pattern: "^gpu-[0-9]+$"}`, proof, 1)))
	if err != nil {
		t.Fatal(err)
	}
	k.suite = &suite{m: m}
}

// rateLimited is what client-go's rate limiter answers when waiting for a
// token would pass the context's deadline.
var rateLimited = errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")

// Errors of the client while a check waits, a rate limiter's near the
// deadline, neither end the wait nor stand in for what the check saw: the
// error says what was waited for, the pod's last state, then the client's
// error.
func TestWaitsReportTheLastObservationOverClientErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse string
		check  func(*suite) check
		// pod's reads fail once it has been read after times.
		pod   string
		after int
		want  []string
	}{{
		name: "opaque config", refuse: refuseSilently, check: func(s *suite) check { return s.opaqueConfig },
		pod: "invalid", after: 5,
		want: []string{"waited 2s for the kubelet's FailedPrepareDynamicResources event for pod invalid", "last seen: Pending"},
	}, {
		name: "device taints", refuse: refuseWithEvent, check: func(s *suite) check { return s.deviceTaints },
		pod: "every", after: 0,
		want: []string{"waited 2s for the scheduler to find pod every unschedulable: a claim for every device of node node-a while gpu.example.com/node-a/gpu-0 is tainted NoSchedule"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, k := newFakeCluster(t, tc.refuse)
			k.m.Timeouts.PodRunning = 2 * time.Second
			reads := 0
			f.failPodReads(func(name string) error {
				if name != tc.pod {
					return nil
				}
				if reads++; reads > tc.after {
					return rateLimited
				}
				return nil
			})
			start := time.Now()
			err := tc.check(k.suite)(context.Background(), t.Logf, k)
			took := time.Since(start)
			f.failPodReads(nil)
			if err == nil {
				t.Fatal("the check passed without evidence")
			}
			msg := err.Error()
			for _, w := range append(tc.want, "last error: client rate limiter Wait returned an error") {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if strings.HasPrefix(msg, "client rate limiter") {
				t.Errorf("error %q starts with the client's error, not with what was waited for", msg)
			}
			if took < k.m.Timeouts.PodRunning {
				t.Errorf("the check gave up after %v of its %v wait, at a client error", took.Round(time.Millisecond), k.m.Timeouts.PodRunning)
			}
			if err := k.cleanup(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
}

// On a cluster that does not serve resource.k8s.io/v1 DeviceTaintRules
// (Kubernetes 1.36, or 1.37 with the resource switched off), the
// device-taints check is not verified, naming what the cluster lacks, and
// creates nothing.
func TestDeviceTaintsWhereRulesAreNotServed(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	f.client.Resources[0].APIResources = slices.DeleteFunc(f.client.Resources[0].APIResources, func(r metav1.APIResource) bool { return r.Name == "devicetaintrules" })
	err := k.deviceTaints(context.Background(), t.Logf, k)
	var skip skipCheck
	if !errors.As(err, &skip) || !strings.Contains(err.Error(), "does not serve DeviceTaintRules in resource.k8s.io/v1") {
		t.Fatalf("got %v, want the check not verified: the cluster does not serve v1 DeviceTaintRules", err)
	}
	if n := len(f.createdRules()); n != 0 {
		t.Errorf("the check created %d DeviceTaintRules on a cluster that does not serve them", n)
	}
}
