package soak

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/procid"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// allocated is a claim allocated the given devices (pool/device[#share])
// on a node.
func allocated(name, node string, devices ...string) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, UID: types.UID("00000000-0000-0000-0000-" + strings.Repeat("0", 12-len(name)) + name)}}
	a := &resourceapi.AllocationResult{NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
	for _, d := range devices {
		pd, share, _ := strings.Cut(d, "#")
		pool, dev, _ := strings.Cut(pd, "/")
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpu.DriverName, Pool: pool, Device: dev}
		if share != "" {
			r.ShareID = ptr.To(types.UID(share))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{gpu.CapacityMemory: resource.MustParse("12Gi")}
		}
		a.Devices.Results = append(a.Devices.Results, r)
	}
	c.Status.Allocation = a
	return c
}

func nodes(names ...string) []v1.Node {
	var out []v1.Node
	for _, n := range names {
		out = append(out, v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return out
}

func keys(fs []finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.key)
	}
	return out
}

func TestExclusive(t *testing.T) {
	admin := allocated("3", "n1", "n1/gpu-0")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	o := &observation{claims: []resourceapi.ResourceClaim{
		allocated("1", "n1", "n1/gpu-0"),
		allocated("2", "n1", "n1/gpu-1"),
		admin,
		allocated("4", "n1", "n1/gpu-2#a"),
		allocated("5", "n1", "n1/gpu-2#b"),
	}}
	if got := exclusive(o); len(got) != 0 {
		t.Errorf("distinct devices, an admin and two shares: %v; want no finding", keys(got))
	}
	o.claims = append(o.claims, allocated("6", "n1", "n1/gpu-1"))
	got := exclusive(o)
	if len(got) != 1 || !strings.Contains(got[0].message, "gpu.dralab.dev/n1/gpu-1 is allocated whole to 2 claims") ||
		len(got[0].objects) != 3 || !strings.Contains(strings.Join(got[0].objects, " "), "/2 (") || !strings.Contains(strings.Join(got[0].objects, " "), "/6 (") {
		t.Errorf("gpu-1 in two claims: %+v; want one finding naming the device and both claims", got)
	}
}

func TestCapacity(t *testing.T) {
	l4 := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: gpu.DriverName, Pool: resourceapi.ResourcePool{Name: "n1", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{gpu.CapacityMemory: {Value: resource.MustParse("23034Mi")}}}}}}
	o := &observation{slices: []resourceapi.ResourceSlice{l4}, claims: []resourceapi.ResourceClaim{allocated("1", "n1", "n1/gpu-0#a")}}
	if got := capacity(o); len(got) != 0 {
		t.Errorf("one 12Gi share of 23034Mi: %v", keys(got))
	}
	o.claims = append(o.claims, allocated("2", "n1", "n1/gpu-0#b"))
	got := capacity(o)
	if len(got) != 1 || !strings.Contains(got[0].message, "24Gi allocated of 23034Mi") || len(got[0].objects) != 2 {
		t.Errorf("two 12Gi shares of 23034Mi: %+v; want one finding naming both claims", got)
	}

	// Two MIG placements over one memory slice.
	counter := func(n int64) map[string]resourceapi.Counter {
		return map[string]resourceapi.Counter{"memory-slice-0": {Value: *resource.NewQuantity(n, resource.DecimalSI)}}
	}
	mig := []resourceapi.ResourceSlice{
		{Spec: resourceapi.ResourceSliceSpec{Driver: gpu.DriverName, Pool: resourceapi.ResourcePool{Name: "m", ResourceSliceCount: 2},
			SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0-counters", Counters: counter(1)}}}},
		{Spec: resourceapi.ResourceSliceSpec{Driver: gpu.DriverName, Pool: resourceapi.ResourcePool{Name: "m", ResourceSliceCount: 2}, Devices: []resourceapi.Device{
			{Name: "gpu-0-mig-1g", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters", Counters: counter(1)}}},
			{Name: "gpu-0-whole", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters", Counters: counter(1)}}},
		}}},
	}
	o = &observation{slices: mig, claims: []resourceapi.ResourceClaim{allocated("3", "m", "m/gpu-0-mig-1g")}}
	if got := capacity(o); len(got) != 0 {
		t.Errorf("one placement: %v", keys(got))
	}
	o.claims = append(o.claims, allocated("4", "m", "m/gpu-0-whole"))
	got = capacity(o)
	if len(got) != 1 || !strings.Contains(got[0].message, "gpu-0-counters/memory-slice-0: 2 allocated of 1") {
		t.Errorf("the whole GPU and a slice of it: %+v; want the memory slice over its counter", got)
	}

	// A time-sliced GPU that consumes the memory slice, shared by two
	// claims: the device consumes its counters once, as the allocator
	// counts them, so two shares are no overcommit.
	shared := []resourceapi.ResourceSlice{mig[0], mig[1]}
	shared[1].Spec.Devices = []resourceapi.Device{{Name: "gpu-0-ts", AllowMultipleAllocations: ptr.To(true),
		Capacity:         map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{gpu.CapacityMemory: {Value: resource.MustParse("80Gi")}},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters", Counters: counter(1)}}}}
	o = &observation{slices: shared, claims: []resourceapi.ResourceClaim{allocated("5", "m", "m/gpu-0-ts#a"), allocated("6", "m", "m/gpu-0-ts#b")}}
	if got := capacity(o); len(got) != 0 {
		t.Errorf("two shares of one device that consumes a counter: %+v; want no finding", got)
	}
}

func TestCheckpointed(t *testing.T) {
	c1, c2 := allocated("1", "n1", "n1/gpu-0"), allocated("2", "n2", "n2/gpu-0")
	cp := &kit.Checkpoint{Claims: map[types.UID]*kit.PreparedClaim{c1.UID: {Namespace: Namespace, Name: "1"}}}
	o := &observation{claims: []resourceapi.ResourceClaim{c1, c2}, nodes: nodes("n1", "n2"), checkpoints: map[string]*kit.Checkpoint{"n1": cp}}
	if got := checkpointed(o); len(got) != 0 {
		t.Errorf("a claim prepared on its node: %v", keys(got))
	}
	cp.Claims[c2.UID] = &kit.PreparedClaim{Namespace: Namespace, Name: "2"}
	cp.Claims["00000000-0000-0000-0000-00000000dead"] = &kit.PreparedClaim{Namespace: Namespace, Name: "gone"}
	got := keys(checkpointed(o))
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), "not allocated to the node") || !strings.Contains(strings.Join(got, "\n"), "does not exist") {
		t.Errorf("a claim of another node and a deleted one in n1's checkpoint: %v", got)
	}
}

func TestCDIOwned(t *testing.T) {
	c := allocated("1", "n1", "n1/gpu-0")
	o := &observation{claims: []resourceapi.ResourceClaim{c}, cdiSpecs: map[string][]string{"n1": {
		"dralab.dev-gpu.json", // the node's own spec
		"dralab.dev-gpu_" + string(c.UID) + ".json",
	}}}
	if got := cdiOwned(o); len(got) != 0 {
		t.Errorf("the node's spec and a live claim's: %v", keys(got))
	}
	o.cdiSpecs["n1"] = append(o.cdiSpecs["n1"], "dralab.dev-gpu_00000000-0000-0000-0000-00000000dead.json")
	got := cdiOwned(o)
	if len(got) != 1 || !strings.Contains(got[0].objects[0], "node n1: dralab.dev-gpu_00000000-0000-0000-0000-00000000dead.json") {
		t.Errorf("a spec of a deleted claim: %+v", got)
	}
}

func TestPodsAccounted(t *testing.T) {
	b := bounds{containerCreating: time.Minute, terminating: time.Minute, unexplained: 30 * time.Second}
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	pod := func(name string, age time.Duration, mutate func(*v1.Pod)) v1.Pod {
		p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, CreationTimestamp: at(age)}}
		p.Status.Phase = v1.PodPending
		mutate(&p)
		return p
	}
	running := func(p *v1.Pod) { p.Spec.NodeName, p.Status.Phase = "n1", v1.PodRunning }
	scheduled := func(ago time.Duration) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.NodeName = "n1"
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: at(ago)}}
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "work", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		}
	}
	// A pod whose claim asks for a class no device matches: the report
	// names NoMatchingDevice.
	explained := func(p *v1.Pod) {
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("wanting")}}
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "cannot allocate all claims"}}
	}
	wanting := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "wanting", Namespace: Namespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpu.Tiers[0].ClassName()}}}}}}
	deleting := func(ago time.Duration) func(*v1.Pod) {
		return func(p *v1.Pod) { running(p); p.DeletionTimestamp = ptr.To(at(ago)) }
	}
	o := &observation{at: now, claims: []resourceapi.ResourceClaim{wanting}, classes: gpu.DeviceClasses(), nodes: nodes("n1"), pods: []v1.Pod{
		pod("running", time.Hour, running),
		pod("new", 10*time.Second, func(*v1.Pod) {}),
		pod("explained", time.Hour, explained),
		pod("creating", time.Hour, scheduled(30*time.Second)),
		pod("leaving", time.Hour, deleting(30*time.Second)),
	}}
	got, err := podsAccounted(context.Background(), o, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("pods within their bounds: %v", keys(got))
	}
	o.pods = append(o.pods,
		pod("unexplained", time.Hour, func(*v1.Pod) {}),
		pod("stuck", time.Hour, scheduled(2*time.Minute)),
		pod("lingering", time.Hour, deleting(2*time.Minute)),
		pod("failed", time.Hour, func(p *v1.Pod) { p.Status.Phase, p.Status.Reason = v1.PodFailed, "UnexpectedAdmissionError" }),
	)
	got, err = podsAccounted(context.Background(), o, b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pod dralab-soak/unexplained": "no reason the report can name",
		"pod dralab-soak/stuck":       "scheduled to n1 2m0s ago and not running (ContainerCreating)",
		"pod dralab-soak/lingering":   "terminating for 2m0s",
		"pod dralab-soak/failed":      "Failed: UnexpectedAdmissionError",
	}
	if len(got) != len(want) {
		t.Errorf("findings %v; want one for each of %v", keys(got), want)
	}
	for _, f := range got {
		if w, ok := want[f.objects[0]]; !ok || !strings.Contains(f.message, w) {
			t.Errorf("finding %q about %v; want %q", f.message, f.objects, w)
		}
	}
	// After settle, no wait is allowed.
	o.pods = o.pods[:5]
	got, err = podsAccounted(context.Background(), o, bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 { // new (unexplained), creating, leaving
		t.Errorf("settled: %v; want the new, the creating and the leaving pod", keys(got))
	}
}

func TestPreparedOnce(t *testing.T) {
	c := allocated("1", "n1", "n1/gpu-0", "n1/gpu-1")
	p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: Namespace}, Spec: v1.PodSpec{NodeName: "n1",
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.Name)}}}}
	p.Status.Phase = v1.PodRunning
	prepared := func(devices ...string) *kit.PreparedClaim {
		pc := &kit.PreparedClaim{}
		for _, d := range devices {
			pc.Devices = append(pc.Devices, kit.PreparedDevice{Pool: "n1", Device: d})
		}
		return pc
	}
	cps := func(byNode map[string]*kit.PreparedClaim) map[string]*kit.Checkpoint {
		out := map[string]*kit.Checkpoint{}
		for n, pc := range byNode {
			out[n] = &kit.Checkpoint{Claims: map[types.UID]*kit.PreparedClaim{c.UID: pc}}
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		checkpoints map[string]*kit.Checkpoint
		want        string
	}{
		{"prepared on its node", cps(map[string]*kit.PreparedClaim{"n1": prepared("gpu-0", "gpu-1")}), ""},
		{"not prepared", nil, "prepared on []"},
		{"prepared on two nodes", cps(map[string]*kit.PreparedClaim{"n1": prepared("gpu-0", "gpu-1"), "n2": prepared("gpu-0")}), "prepared on [n1, n2]"},
		{"prepared on another node", cps(map[string]*kit.PreparedClaim{"n2": prepared("gpu-0", "gpu-1")}), "prepared on [n2]"},
		{"another device prepared", cps(map[string]*kit.PreparedClaim{"n1": prepared("gpu-0", "gpu-2")}), "prepared [n1/gpu-0# n1/gpu-2#]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &observation{pods: []v1.Pod{p}, claims: []resourceapi.ResourceClaim{c}, checkpoints: tc.checkpoints}
			got := preparedOnce(o)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("findings %v; want none", keys(got))
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].message, tc.want)):
				t.Errorf("findings %v; want one saying %q", keys(got), tc.want)
			}
		})
	}
}

// TestCheckerConfirms: a finding about objects that change one after the
// other is a violation only once it has persisted; one about a single
// list of claims is one at once; a suspect that goes away is forgotten.
func TestCheckerConfirms(t *testing.T) {
	c := newChecker()
	var found []finding
	checks := []check{{"fake", func(context.Context, *observation) ([]finding, error) { return found, nil }}}
	round := func(at time.Time) {
		t.Helper()
		if err := c.round(context.Background(), checks, &observation{at: at}, 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	orphan := newFinding(InvCDI, "CDI spec of a claim that does not exist", "node n1: x.json")
	found = []finding{orphan}
	round(now)
	round(now.Add(time.Second))
	if _, _, v := c.results(); len(v) != 0 {
		t.Fatalf("violations after a finding of 1 s: %v", v)
	}
	found = nil
	round(now.Add(2 * time.Second))
	found = []finding{orphan}
	round(now.Add(4 * time.Second))
	if _, _, v := c.results(); len(v) != 0 {
		t.Fatalf("a finding that went away and came back was confirmed at once: %v", v)
	}
	round(now.Add(8 * time.Second))
	round(now.Add(10 * time.Second))
	found = []finding{newFinding(InvExclusive, "device d is allocated whole to 2 claims", "a", "b")}
	round(now.Add(11 * time.Second))
	checksMade, rounds, v := c.results()
	if len(v) != 2 || v[0].Invariant != InvCDI || v[1].Invariant != InvExclusive {
		t.Errorf("violations %v; want the persistent CDI finding once, then the double allocation", v)
	}
	if rounds != 7 || checksMade["fake"] != 7 {
		t.Errorf("rounds %d, checks %v; want 7 of each", rounds, checksMade)
	}
}

// TestLeftovers: a recorded process that still runs, a port that still
// listens, the state directory and a short link are found; once gone,
// nothing is.
func TestLeftovers(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	id, err := procid.Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	state := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	r := labResources{procs: []procid.ID{id}, stateDir: state, links: []string{link},
		listeners: []procid.Listener{{IP: net.IPv4(127, 0, 0, 1), Port: ln.Addr().(*net.TCPAddr).Port}}}
	got := r.left()
	if len(got) != 4 {
		t.Errorf("left %v; want the process, the port, the state directory and the link", keys(got))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	ln.Close()
	os.Remove(link)
	os.RemoveAll(state)
	if got := r.left(); len(got) != 0 {
		t.Errorf("after all went: %v", keys(got))
	}
}

func TestSummarise(t *testing.T) {
	var seconds []float64
	for i := 100; i > 0; i-- {
		seconds = append(seconds, float64(i))
	}
	got := summarise(seconds)
	if got != (Latency{Count: 100, P50: 51, P99: 100, Max: 100}) {
		t.Errorf("summarise(1…100) = %+v", got)
	}
	if got := summarise(nil); got != (Latency{}) {
		t.Errorf("summarise(nil) = %+v", got)
	}
}

// A claim on its way out before the lab is killed need not survive it.
func TestClaimLeaving(t *testing.T) {
	leaving := map[types.UID]bool{"p-gone": true}
	owned := allocated("1", "n1", "n1/gpu-0")
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "p", UID: "p-gone"}}
	reserved := allocated("2", "n1", "n1/gpu-1")
	reserved.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "p-gone"}}
	deleted := allocated("3", "n1", "n1/gpu-2")
	deleted.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	staying := allocated("4", "n1", "n1/gpu-3")
	staying.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "q", UID: "q-running"}}
	for _, c := range []resourceapi.ResourceClaim{owned, reserved, deleted} {
		if !claimLeaving(&c, leaving) {
			t.Errorf("claim %s: not leaving, want leaving", c.Name)
		}
	}
	if claimLeaving(&staying, leaving) {
		t.Error("a claim of a running pod counted as leaving")
	}
}
