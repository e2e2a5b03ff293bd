package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dralab/dralab/lab"
)

// TestNVMLMockLab brings up lab/examples/nvml-mock.yaml: the GPU driver
// with its NVML inventory, go-nvml's mock servers standing in for the
// library, on hollow nodes. The slices are the mocks' GPUs; the claims and
// prioritized-fallback scenarios pass with them; and the driver passes
// both conformance layers for its manifest, drivers/nvml/driver.yaml, whose
// partition check has the driver create MIG instances in the DGX A100
// mock, which is in MIG mode.
func TestNVMLMockLab(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	l, restConfig, client := upLab(ctx, t, stateRoot(t), bin, exampleConfig(t, "nvml-mock.yaml", "t-nvml"))

	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	products := map[string][]string{}
	migs, counterSets := map[string]int{}, map[string]int{}
	for _, s := range slices.Items {
		if n := len(s.Spec.SharedCounters); n > 0 {
			counterSets[s.Spec.Pool.Name] += n
		}
		for _, d := range s.Spec.Devices {
			a := d.Attributes
			if typ := a["type"].StringValue; typ != nil && *typ == "mig" {
				if p := a["parentUUID"].StringValue; p == nil || !strings.HasPrefix(*p, "GPU-") || len(d.ConsumesCounters) != 1 {
					t.Errorf("MIG device %s/%s lacks a parent UUID or counters: %v", s.Spec.Pool.Name, d.Name, a)
				}
				migs[s.Spec.Pool.Name]++
				continue
			}
			if a["uuid"].StringValue == nil || !strings.HasPrefix(*a["uuid"].StringValue, "GPU-") || a["resource.kubernetes.io/pcieRoot"].StringValue == nil {
				t.Errorf("%s/%s lacks a UUID or PCIe root: %v", s.Spec.Pool.Name, d.Name, a)
			}
			products[*s.Spec.NodeName] = append(products[*s.Spec.NodeName], *a["productName"].StringValue)
		}
	}
	for node, want := range map[string]string{
		"dgx-h100": strings.Repeat("NVIDIA H100 80GB HBM3,", 8),
		"dgx-a100": strings.Repeat("Mock NVIDIA A100-SXM4-40GB,", 8),
		"mixed":    strings.Repeat("NVIDIA H100 80GB HBM3,", 2) + strings.Repeat("NVIDIA A100-SXM4-80GB,", 2) + strings.Repeat("NVIDIA L4,", 4),
	} {
		if got := strings.Join(products[node], ",") + ","; got != want {
			t.Errorf("node %s publishes %s, want %s", node, got, want)
		}
	}

	// The DGX A100 in MIG mode: per GPU a counter set and 25 MIG devices
	// (7 × 1g.5gb, 7 × 1g.5gb+me, 4 × 1g.10gb, 3 × 2g.10gb, 2 × 3g.20gb,
	// 4g.20gb, 7g.40gb); the other nodes none.
	want := map[string]int{"dgx-a100": 8 * 25}
	if !maps.Equal(migs, want) || !maps.Equal(counterSets, map[string]int{"dgx-a100": 8}) {
		t.Errorf("MIG devices by node %v (want %v), counter sets %v (want 8 on dgx-a100)", migs, want, counterSets)
	}

	runScenarios(ctx, t, l, restConfig, "claims", "prioritized-fallback")

	runConformance(ctx, t, l, client, "../drivers/nvml/driver.yaml")

	// gpu:fail on an NVML node: the Xid goes through the mock's event set
	// (patched at the nvmllib boundary) to the driver's event watch, which
	// taints the GPU and its MIG devices; gpu:heal resets the mock GPU.
	ref := lab.GPURef{Node: "dgx-a100", Device: "gpu-3"}
	if _, err := l.FailGPU(ctx, ref, 48); err != nil {
		t.Fatal(err)
	}
	waitTaint := func(want string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return deviceTaint(ctx, client, ref) == want && deviceTaint(ctx, client, lab.GPURef{Node: ref.Node, Device: "gpu-3-mig-7g40gb-0"}) == want, nil
		}); err != nil {
			t.Fatalf("%s and its MIG devices: taint %q, want %q", ref, deviceTaint(ctx, client, ref), want)
		}
	}
	waitTaint("gpu.dralab.dev/xid=48:NoSchedule")
	if err := l.HealGPU(ctx, ref); err != nil {
		t.Fatal(err)
	}
	waitTaint("")

	// An Xid 79: the mock GPU falls off the bus as a real one does (it
	// answers ERROR_GPU_IS_LOST, and so does every wait of the event set).
	// The GPU is tainted NoExecute within 10 s, no other GPU of the node
	// is, and the driver does not spin on the lost GPU: under 5 % of a
	// core.
	lostRef := lab.GPURef{Node: "dgx-h100", Device: "gpu-2"}
	start := time.Now()
	if _, err := l.FailGPU(ctx, lostRef, 79); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return deviceTaint(ctx, client, lostRef) == "gpu.dralab.dev/xid=79:NoExecute", nil
	}); err != nil {
		t.Fatalf("%s: taint %q 10 s after its Xid 79, want gpu.dralab.dev/xid=79:NoExecute", lostRef, deviceTaint(ctx, client, lostRef))
	}
	t.Logf("%s tainted %s after its Xid 79", lostRef, time.Since(start).Round(time.Millisecond))
	for _, other := range []string{"gpu-0", "gpu-1", "gpu-3", "gpu-7"} {
		if taint := deviceTaint(ctx, client, lab.GPURef{Node: lostRef.Node, Device: other}); taint != "" {
			t.Errorf("%s/%s is tainted %q: only gpu-2 fell off the bus", lostRef.Node, other, taint)
		}
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, n := range st.Nodes {
		if n.Name == lostRef.Node {
			pid = n.DriverPID
		}
	}
	before := cpuTime(t, pid)
	time.Sleep(3 * time.Second)
	if used := cpuTime(t, pid) - before; used > 150*time.Millisecond {
		t.Errorf("with a lost GPU the driver of %s used %s of CPU in 3 s, over 5 %% of a core", lostRef.Node, used)
	} else {
		t.Logf("with a lost GPU the driver used %s of CPU in 3 s", used)
	}
	if err := l.HealGPU(ctx, lostRef); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return deviceTaint(ctx, client, lostRef) == "", nil
	}); err != nil {
		t.Fatalf("%s healed: taint %q", lostRef, deviceTaint(ctx, client, lostRef))
	}
}

// cpuTime is the CPU time a process has used, user and system, from
// /proc/<pid>/stat (in clock ticks of 10 ms, Linux's USER_HZ).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no driver PID (%d)", pid)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
