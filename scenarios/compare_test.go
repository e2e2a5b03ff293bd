package scenarios

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

func running(pod, sub, tier, device string) allocation.Row {
	return allocation.Row{Pod: pod, Phase: v1.PodRunning, Node: "n", Request: "gpu", Subrequest: sub, Tier: tier,
		Driver: "gpu.dralab.dev", Pool: "n", Device: device}
}

func pending(pod, code string) allocation.Row {
	return allocation.Row{Pod: pod, Phase: v1.PodPending, Unschedulable: true, ReasonCode: code, Reason: "all 1 matching devices are allocated"}
}

// The prioritized-fallback scenario's first step, checked against outcomes.
func fallbackExpect(t *testing.T) ([]Expectation, Inventory) {
	t.Helper()
	s, err := Get("prioritized-fallback")
	if err != nil {
		t.Fatal(err)
	}
	return s.Steps[1].Expect, Inventory{Devices: map[string]int{"h100": 1, "a100": 1, "l4": 2}}
}

func TestCheckPasses(t *testing.T) {
	expect, inv := fallbackExpect(t)
	rows := []allocation.Row{
		running("worker-0", "h100", "h100", "gpu-0"),
		running("worker-1", "a100", "a100", "gpu-0"),
		running("worker-2", "l4", "l4", "gpu-0"),
		running("worker-3", "l4", "l4", "gpu-1"),
		pending("worker-4", allocation.AllAllocated),
	}
	if f := Check(expect, Outcomes(rows), inv); len(f) > 0 {
		t.Errorf("unexpected failures: %v", f)
	}
}

// A wrong outcome fails, and the message shows expected and actual.
func TestCheckShowsExpectedAndActual(t *testing.T) {
	expect, inv := fallbackExpect(t)
	rows := []allocation.Row{
		running("worker-0", "h100", "h100", "gpu-0"),
		running("worker-1", "l4", "l4", "gpu-5"), // an L4 where an A100 was expected
		running("worker-2", "l4", "l4", "gpu-0"),
		running("worker-3", "l4", "l4", "gpu-1"),
		pending("worker-4", allocation.AllAllocated),
	}
	failures := strings.Join(Check(expect, Outcomes(rows), inv), "\n")
	for _, want := range []string{
		`pod worker-1: chosen subrequest: expected a100, got l4`,
		`pod worker-1: tier: expected a100, got l4`,
	} {
		if !strings.Contains(failures, want) {
			t.Errorf("failures lack %q:\n%s", want, failures)
		}
	}
}

// Editing an expectation to a wrong tier makes a correct outcome fail.
func TestCheckFailsOnEditedExpectation(t *testing.T) {
	expect, inv := fallbackExpect(t)
	expect = append([]Expectation(nil), expect...)
	expect[1].Tier = "l4"
	rows := []allocation.Row{
		running("worker-0", "h100", "h100", "gpu-0"),
		running("worker-1", "a100", "a100", "gpu-0"),
		running("worker-2", "l4", "l4", "gpu-0"),
		running("worker-3", "l4", "l4", "gpu-1"),
		pending("worker-4", allocation.AllAllocated),
	}
	failures := Check(expect, Outcomes(rows), inv)
	if len(failures) != 1 || !strings.Contains(failures[0], "tier: expected l4, got a100") {
		t.Errorf("failures = %v", failures)
	}
}

func TestCheckCountsAndGroups(t *testing.T) {
	two := 2
	inv := Inventory{Counted: map[string]int{"h100": 1, "l4": 2}}
	outcomes := Outcomes([]allocation.Row{
		{Pod: "p-0", Phase: v1.PodRunning, Node: "count-h100", NodeTier: "h100"},
		{Pod: "p-1", Phase: v1.PodRunning, Node: "count-l4", NodeTier: "l4"},
		{Pod: "p-2", Phase: v1.PodRunning, Node: "count-h100", NodeTier: "h100"},
	})
	f := Check([]Expectation{{Pods: "p-*", TierCounts: map[string]Count{"h100": {CountedOf: []string{"h100"}}, "l4": {CountedOf: []string{"l4"}}}}}, outcomes, inv)
	if len(f) != 1 || !strings.Contains(f[0], "expected map[h100:1 l4:2], got map[h100:2 l4:1]") {
		t.Errorf("tier counts: %v", f)
	}
	f = Check([]Expectation{{Pods: "p-*", Count: &Count{N: &two}, Phase: "Running"}, {Pods: "p-*", Count: &Count{N: &two}}}, outcomes, inv)
	if len(f) != 1 || !strings.Contains(f[0], "expected 2 pods (2), found 1: [p-2]") {
		t.Errorf("groups: %v", f)
	}
	shared := Outcomes([]allocation.Row{running("a", "", "l4", "gpu-0"), running("b", "", "l4", "gpu-1")})
	if f := Check([]Expectation{{Pods: "*", SameDevice: true}}, shared, inv); len(f) != 1 || !strings.Contains(f[0], "one device shared") {
		t.Errorf("same device: %v", f)
	}
}

// A MIG profile and a share's consumed memory are checked per device; a
// consumed amount needs a share ID and compares by value.
func TestCheckProfileAndShare(t *testing.T) {
	slice := running("m", "", "", "gpu-0-mig-1g10gb-0")
	slice.Profile = "1g.10gb"
	share := running("s", "", "l4", "gpu-0")
	share.ShareID, share.Consumed = "a1", "7Gi"
	whole := running("w", "", "l4", "gpu-1")
	outcomes := Outcomes([]allocation.Row{slice, share, whole})
	if f := Check([]Expectation{{Pods: "m", Profile: "1g.10gb"}, {Pods: "s", Consumed: "7168Mi"}}, outcomes, Inventory{}); len(f) > 0 {
		t.Errorf("unexpected failures: %v", f)
	}
	f := strings.Join(Check([]Expectation{{Pods: "m", Profile: "3g.40gb"}, {Pods: "w", Consumed: "7Gi"}}, outcomes, Inventory{}), "\n")
	for _, want := range []string{"MIG profile: expected 3g.40gb, got 1g.10gb", "consumed capacity of a share: expected 7Gi, got none share none"} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

// Shares are counted from what each shared GPU has left, never beyond the
// most one share may take: an L4 of 23034Mi holds three 7Gi shares, two
// 8Gi ones, no 30Gi one.
func TestResolveShares(t *testing.T) {
	l4 := allocation.FreeShare{Left: resource.MustParse("23034Mi"), MaxShare: resource.MustParse("22Gi")}
	inv := Inventory{Shares: map[string][]allocation.FreeShare{"l4": {l4}}}
	for memory, want := range map[string]int{"7Gi": 3, "8Gi": 2, "30Gi": 0} {
		if got := inv.Resolve(&Count{SharesOf: &Shares{Tier: "l4", Memory: memory}}); got != want {
			t.Errorf("shares of %s = %d, want %d", memory, got, want)
		}
	}
	if got := inv.Resolve(&Count{SharesOf: &Shares{Tier: "h100", Memory: "7Gi"}, Plus: 1}); got != 1 {
		t.Errorf("no shared h100 + 1 = %d, want 1", got)
	}
}

// CheckEach says, per expectation, what it asked in words (counts
// resolved), which pods it took, and whether it held: what a report's
// expected-vs-actual table shows.
func TestCheckEachPerExpectation(t *testing.T) {
	expect, inv := fallbackExpect(t)
	rows := []allocation.Row{
		running("worker-0", "h100", "h100", "gpu-0"),
		running("worker-1", "l4", "l4", "gpu-5"),
		running("worker-2", "l4", "l4", "gpu-0"),
		running("worker-3", "l4", "l4", "gpu-1"),
		pending("worker-4", allocation.AllAllocated),
	}
	res := CheckEach(expect, Outcomes(rows), inv)
	if len(res) != len(expect) {
		t.Fatalf("%d results for %d expectations", len(res), len(expect))
	}
	want := []struct {
		expected string
		pods     string
		held     bool
	}{
		{"1 pod worker-* (devices of [h100]): phase Running, request gpu, subrequest h100, tier h100", "worker-0", true},
		{"1 pod worker-* (devices of [a100]): phase Running, subrequest a100, tier a100", "worker-1", false},
		{"2 pods worker-* (devices of [l4]): phase Running, subrequest l4, tier l4", "worker-2 worker-3", true},
		{"1 pod worker-*: phase Pending, reason AllAllocated or CapacityExhausted", "worker-4", true},
	}
	for i, w := range want {
		r := res[i]
		if r.Expected != w.expected || strings.Join(r.Pods, " ") != w.pods || r.Held() != w.held {
			t.Errorf("expect[%d]: got %q on %v (held %v, %v), want %q on %s (held %v)", i, r.Expected, r.Pods, r.Held(), r.Failures, w.expected, w.pods, w.held)
		}
	}
	if f := res[1].Failures; len(f) == 0 || !strings.Contains(f[0], "pod worker-1: chosen subrequest: expected a100, got l4") {
		t.Errorf("expect[1]'s failures %q do not show the mismatch", f)
	}
}

// A pod's devices by driver, and an attribute each device must have a
// value of its own of: a GPU and a NIC; two NICs, or one NIC twice.
func TestCheckDriversAndDistinct(t *testing.T) {
	nic := func(pod, device, bus string) allocation.Row {
		r := running(pod, "", "", device)
		r.Driver, r.Attributes = "nic.dralab.dev", map[string]string{"resource.kubernetes.io/pciBusID": bus}
		return r
	}
	gpuRow := running("pair", "", "l4", "gpu-0")
	gpuRow.Attributes = map[string]string{"resource.kubernetes.io/pciBusID": "0000:16:00.0"}
	outcomes := Outcomes([]allocation.Row{gpuRow, nic("pair", "nic-0", "0000:18:00.0"), nic("spread", "nic-0", "0000:18:00.0"), nic("spread", "nic-1", "0000:19:00.0"), nic("both", "nic-0", "0000:18:00.0"), nic("both", "nic-0", "0000:18:00.0")})
	pass := []Expectation{
		{Pods: "pair", DriverDevices: map[string]int{"gpu.dralab.dev": 1, "nic.dralab.dev": 1}},
		// None of a driver is a count: the pod got nothing of it.
		{Pods: "pair", DriverDevices: map[string]int{"gpu.dralab.dev": 1, "nic.dralab.dev": 1, "cpu.dralab.dev": 0}},
		{Pods: "spread", DriverDevices: map[string]int{"nic.dralab.dev": 2}, DistinctAttribute: "resource.kubernetes.io/pciBusID"},
		{Pods: "both", SameAttribute: "resource.kubernetes.io/pciBusID"},
	}
	if f := Check(pass, outcomes, Inventory{}); len(f) > 0 {
		t.Errorf("unexpected failures: %v", f)
	}
	fail := []Expectation{
		{Pods: "pair", DriverDevices: map[string]int{"gpu.dralab.dev": 1}},
		{Pods: "both", DistinctAttribute: "resource.kubernetes.io/pciBusID"},
	}
	f := strings.Join(Check(fail, outcomes, Inventory{}), "\n")
	for _, want := range []string{
		"devices by driver: expected map[gpu.dralab.dev:1], got map[gpu.dralab.dev:1 nic.dralab.dev:1]",
		"resource.kubernetes.io/pciBusID: expected a value of its own for each device, got 0000:18:00.0 for both",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

// What the node did for a device: skipped (the allocation says so and no
// driver wrote a status) or prepared (Ready in the claim's status).
func TestCheckNodeOperations(t *testing.T) {
	skipped := running("quiet", "", "", "nic-0")
	skipped.SkipNodeOperations = []string{"*"}
	prepared := running("busy", "", "", "nic-1")
	prepared.Conditions = []string{"Ready"}
	sneaky := running("sneaky", "", "", "nic-2")
	sneaky.SkipNodeOperations, sneaky.Conditions = []string{"*"}, []string{"Ready"}
	outcomes := Outcomes([]allocation.Row{skipped, prepared, sneaky})
	if f := Check([]Expectation{{Pods: "quiet", NodeOperations: NodeOperationsSkipped}, {Pods: "busy", NodeOperations: NodeOperationsPrepared}}, outcomes, Inventory{}); len(f) > 0 {
		t.Errorf("unexpected failures: %v", f)
	}
	f := strings.Join(Check([]Expectation{
		{Pods: "quiet", NodeOperations: NodeOperationsPrepared},
		{Pods: "busy", NodeOperations: NodeOperationsSkipped},
		{Pods: "sneaky", NodeOperations: NodeOperationsSkipped},
	}, outcomes, Inventory{}), "\n")
	for _, want := range []string{
		"pod quiet: node operations: expected prepared, and Ready in the claim's status, got skipNodeOperations [*], status conditions []",
		"pod busy: node operations: expected prepare skipped and no status from the driver, got skipNodeOperations [], status conditions [Ready]",
		"pod sneaky: node operations: expected prepare skipped and no status from the driver, got skipNodeOperations [*], status conditions [Ready]",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

// One value across attributes that two drivers name differently: a GPU's
// own numa and a NIC's standard numaNode.
func TestCheckSameValueOf(t *testing.T) {
	row := func(pod, driver, device string, attrs map[string]string) allocation.Row {
		r := running(pod, "", "", device)
		r.Driver, r.Attributes = driver, attrs
		return r
	}
	outcomes := Outcomes([]allocation.Row{
		row("aligned", "gpu.dralab.dev", "gpu-4", map[string]string{"numa": "1"}),
		row("aligned", "nic.dralab.dev", "nic-4", map[string]string{"resource.kubernetes.io/numaNode": "1"}),
		row("apart", "gpu.dralab.dev", "gpu-0", map[string]string{"numa": "0"}),
		row("apart", "nic.dralab.dev", "nic-4", map[string]string{"resource.kubernetes.io/numaNode": "1"}),
		row("blind", "gpu.dralab.dev", "gpu-0", map[string]string{}),
	})
	numa := []string{"gpu.dralab.dev/numa", "resource.kubernetes.io/numaNode"}
	if f := Check([]Expectation{{Pods: "aligned", SameValueOf: numa}}, outcomes, Inventory{}); len(f) > 0 {
		t.Errorf("unexpected failures: %v", f)
	}
	f := strings.Join(Check([]Expectation{{Pods: "apart", SameValueOf: numa}, {Pods: "blind", SameValueOf: numa}}, outcomes, Inventory{}), "\n")
	for _, want := range []string{
		"pod apart: gpu.dralab.dev/numa or resource.kubernetes.io/numaNode: expected one value for all devices, got [0 1]",
		"pod blind: gpu.dralab.dev/numa or resource.kubernetes.io/numaNode: expected an attribute of every device, got none",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

// What the scheduler accounted through a pod's devices is compared by
// value, and a resource it accounted that the scenario does not name fails.
func TestCheckNodeAllocatable(t *testing.T) {
	r := running("t", "", "h100", "gpu-0")
	r.NodeAllocatable = v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Gi")}
	outcomes := Outcomes([]allocation.Row{r})
	if f := Check([]Expectation{{Pods: "t", NodeAllocatable: map[string]string{"memory": "8192Mi"}}}, outcomes, Inventory{}); len(f) > 0 {
		t.Errorf("unexpected failures: %v", f)
	}
	// An amount of 0 is one the devices add none of, named in the status
	// or not.
	if f := Check([]Expectation{{Pods: "t", NodeAllocatable: map[string]string{"memory": "8Gi", "cpu": "0"}}}, outcomes, Inventory{}); len(f) > 0 {
		t.Errorf("8Gi of memory and no CPU: unexpected failures: %v", f)
	}
	none := Outcomes([]allocation.Row{running("n", "", "h100", "gpu-1")})
	if f := Check([]Expectation{{Pods: "n", NodeAllocatable: map[string]string{"memory": "0"}}}, none, Inventory{}); len(f) > 0 {
		t.Errorf("no memory through a device that adds none: unexpected failures: %v", f)
	}
	for _, want := range []map[string]string{{"memory": "4Gi"}, {"memory": "8Gi", "cpu": "2"}, {"cpu": "0"}} {
		if f := Check([]Expectation{{Pods: "t", NodeAllocatable: want}}, outcomes, Inventory{}); len(f) != 1 || !strings.Contains(f[0], "nodeAllocatableResourceClaimStatuses") {
			t.Errorf("expecting %v: failures %v, want one naming the pod's status", want, f)
		}
	}
}

// Device metadata must name exactly the pod's devices, each under its
// request (a subrequest as request/subrequest), with its slice's
// attributes.
func TestCheckDeviceMetadata(t *testing.T) {
	meta := func(request, device string, same bool) allocation.MetadataDevice {
		return allocation.MetadataDevice{Path: "/var/run/kubernetes.io/dra-device-attributes/x", Request: request, Driver: "gpu.dralab.dev", Pool: "n", Device: device, Attributes: 3, SameAsSlice: same}
	}
	row := func(sub string, m ...allocation.MetadataDevice) []allocation.Row {
		r := running("p", sub, "h100", "gpu-0")
		r.Metadata = m
		return []allocation.Row{r}
	}
	e := []Expectation{{Pods: "p", DeviceMetadata: true}}
	if f := Check(e, Outcomes(row("", meta("gpu", "gpu-0", true))), Inventory{}); len(f) > 0 {
		t.Errorf("the pod's device: %v", f)
	}
	if f := Check(e, Outcomes(row("h100", meta("gpu/h100", "gpu-0", true))), Inventory{}); len(f) > 0 {
		t.Errorf("a subrequest's device: %v", f)
	}
	for name, c := range map[string]struct {
		rows []allocation.Row
		want string
	}{
		"no file":          {row(""), "a file naming gpu.dralab.dev/n/gpu-0"},
		"another device":   {row("", meta("gpu", "gpu-1", true)), "a file naming gpu.dralab.dev/n/gpu-0"},
		"another request":  {row("", meta("other", "gpu-0", true)), "request gpu"},
		"other attributes": {row("", meta("gpu", "gpu-0", false)), "the attributes its ResourceSlice publishes"},
		"one device too":   {row("", meta("gpu", "gpu-0", true), meta("gpu", "gpu-1", true)), "only the pod's devices"},
	} {
		f := Check(e, Outcomes(c.rows), Inventory{})
		if len(f) == 0 || !strings.Contains(strings.Join(f, "\n"), c.want) {
			t.Errorf("%s: failures %v, want one containing %q", name, f, c.want)
		}
	}
}

// An expectation without count holds for every pod its pattern matches,
// and so fails when it matches none: a mistyped pattern, or pods never
// made, is no outcome. count: 0 asks for none and holds.
func TestCheckPatternMatchingNoPodFails(t *testing.T) {
	rows := []allocation.Row{running("worker-0", "h100", "h100", "gpu-0")}
	running := Expectation{Pods: "wokrer-*", Phase: string(v1.PodRunning)}
	f := Check([]Expectation{running}, Outcomes(rows), Inventory{})
	if len(f) != 1 || !strings.Contains(f[0], "no pod matches wokrer-*") {
		t.Errorf("an expectation whose pattern matches no pod: %v; want one failure saying no pod matches", f)
	}
	none := Expectation{Pods: "wokrer-*", Count: &Count{N: ptr.To(0)}}
	if f := Check([]Expectation{none}, Outcomes(rows), Inventory{}); len(f) != 0 {
		t.Errorf("count: 0 of a pattern that matches no pod: %v; want it to hold", f)
	}
	// count: 0 asks that none match: a pod that does fails it.
	none.Pods = "worker-*"
	if f := Check([]Expectation{none}, Outcomes(rows), Inventory{}); len(f) != 1 || !strings.Contains(f[0], "expected no pod worker-*, found 1: [worker-0]") {
		t.Errorf("count: 0 of a pattern that matches a pod: %v; want one failure naming it", f)
	}
}

// A count derived from the cluster that resolves to 0 asks nothing: the
// scenario names each such count, and is unmet there; a literal 0 is a
// count of none, not one of them.
func TestZeroCountsAreNamed(t *testing.T) {
	s := &Scenario{Name: "fallback", Steps: []Step{
		{Name: "fill", CreatePods: &CreatePods{Manifest: "pod.yaml", Replicas: Count{DevicesOf: []string{"h100"}}}},
		{Name: "check", Expect: []Expectation{
			{Pods: "fill-*", Count: &Count{DevicesOf: []string{"h100"}}},
			{Pods: "late-*", Count: &Count{N: ptr.To(0)}},
			{Pods: "fill-*", Count: &Count{DevicesOf: []string{"a100"}}},
		}},
	}}
	got := s.zeroCounts(Inventory{Devices: map[string]int{"a100": 2}})
	want := []string{`steps[0] "fill" createPods.replicas {devicesOf: [h100]}`, `steps[1] "check" expect[0].count {devicesOf: [h100]}`}
	if len(got) != len(want) {
		t.Fatalf("zero counts %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], strings.Fields(want[i])[0]) || !strings.Contains(got[i], "h100") {
			t.Errorf("zero count %d: %q, want like %q", i, got[i], want[i])
		}
	}
	if got := s.zeroCounts(Inventory{Devices: map[string]int{"h100": 1, "a100": 2}}); len(got) != 0 {
		t.Errorf("every derived count above 0: %q named", got)
	}
}
