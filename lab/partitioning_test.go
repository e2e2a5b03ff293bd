package lab_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab/config"
)

// Nodes of the partitioning lab: one H100 cut into MIG devices, one L4
// shared by memory.
const (
	migNode    = "gpu-mig"
	sharedNode = "gpu-shared"
)

func splitConfig(t testing.TB, name string, migGPUs int) *config.Config {
	t.Helper()
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: name, Nodes: []config.Node{
		{Name: migNode, GPUs: &config.GPUs{Profile: "h100-80gb", Count: migGPUs, Partitioning: config.PartitioningMIG}},
		{Name: sharedNode, GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Sharing: config.SharingMemory}},
	}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPartitioning runs MIG and memory sharing on the real scheduler: on
// an H100 partitioned with MIG, 1g.10gb pods run one at a time until the
// published counters say no more fit, the next one is unschedulable, and a
// whole-GPU claim waits while a slice is in use; on a shared L4, pods
// asking for some of its memory share it until its memory is taken, each
// with its own share, and the next waits.
func TestPartitioning(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	_, _, client := upLab(ctx, t, stateRoot(t), bin, splitConfig(t, "t-split", 1))

	t.Run("mig", func(t *testing.T) { testMIG(ctx, t, client) })
	t.Run("sharing", func(t *testing.T) { testSharing(ctx, t, client) })
}

// splitPool is a node's pool as published: every slice of its latest
// generation, once all of them are there.
type splitPool struct {
	sets    map[string]resourceapi.CounterSet
	devices []resourceapi.Device
}

func publishedPool(ctx context.Context, t testing.TB, client kubernetes.Interface, node string) splitPool {
	t.Helper()
	var p splitPool
	var have, want int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		var gen int64 = -1
		var mine []resourceapi.ResourceSlice
		for _, s := range list.Items {
			if s.Spec.Driver != gpu.DriverName || s.Spec.Pool.Name != node {
				continue
			}
			switch {
			case s.Spec.Pool.Generation > gen:
				gen, mine = s.Spec.Pool.Generation, []resourceapi.ResourceSlice{s}
			case s.Spec.Pool.Generation == gen:
				mine = append(mine, s)
			}
		}
		if len(mine) == 0 {
			return false, nil
		}
		have, want = len(mine), int(mine[0].Spec.Pool.ResourceSliceCount)
		p = splitPool{sets: map[string]resourceapi.CounterSet{}}
		for _, s := range mine {
			if len(s.Spec.SharedCounters) > 0 && len(s.Spec.Devices) > 0 {
				t.Errorf("slice %s holds counters and devices", s.Name)
			}
			for _, cs := range s.Spec.SharedCounters {
				p.sets[cs.Name] = cs
			}
			p.devices = append(p.devices, s.Spec.Devices...)
		}
		return have == want, nil
	})
	if err != nil {
		t.Fatalf("waiting for every ResourceSlice of node %s's pool: %v (have %d of %d)", node, err, have, want)
	}
	return p
}

// fitting computes from a pool how many devices that match can be
// allocated at once: each takes its own memory slices, so at most as many
// as there are matching devices whose memory slices do not overlap, and
// at most what every other counter has room for.
func (p splitPool) fitting(match func(resourceapi.Device) bool) (int, string) {
	taken := map[string]bool{}
	n, why := 0, "no device matches"
	need := map[string]map[string]resource.Quantity{}
	for _, d := range p.devices {
		if !match(d) {
			continue
		}
		free := true
		for _, c := range d.ConsumesCounters {
			for name, q := range c.Counters {
				if strings.HasPrefix(name, "memory-slice-") {
					free = free && !taken[c.CounterSet+"/"+name]
					continue
				}
				if need[c.CounterSet] == nil {
					need[c.CounterSet] = map[string]resource.Quantity{}
				}
				need[c.CounterSet][name] = q.Value
			}
		}
		if !free {
			continue
		}
		for _, c := range d.ConsumesCounters {
			for name := range c.Counters {
				if strings.HasPrefix(name, "memory-slice-") {
					taken[c.CounterSet+"/"+name] = true
				}
			}
		}
		n++
		why = fmt.Sprintf("%d placements with distinct memory slices", n)
	}
	for set, counters := range need {
		for _, name := range slices.Sorted(maps.Keys(counters)) {
			q := counters[name]
			total := p.sets[set].Counters[name].Value
			if q.Sign() > 0 {
				if room := int(total.Value() / q.Value()); room < n {
					n, why = room, fmt.Sprintf("counter %s of %s: %s, %s each", name, set, total.String(), q.String())
				}
			}
		}
	}
	return n, why
}

func deviceAttr(d resourceapi.Device, name string) string {
	return ptr.Deref(d.Attributes[resourceapi.QualifiedName(name)].StringValue, "")
}

func createNamespace(ctx context.Context, t testing.TB, client kubernetes.Interface, name string) string {
	t.Helper()
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// podOutcome is where a pod ended: running, or found unschedulable.
type podOutcome string

const (
	outcomeRunning       podOutcome = "Running"
	outcomeUnschedulable podOutcome = "Unschedulable"
)

// allocatorVerdict is the PodScheduled message of a pod whose claims the
// scheduler's allocator weighed on every node and could not place; other
// Unschedulable messages (a claim not yet made from its template, a class or
// a slice not yet in the scheduler's informers) pass as its caches fill.
const allocatorVerdict = "cannot allocate all claims"

// runPod creates a pod and waits until it runs or, where want is
// outcomeUnschedulable, the scheduler's allocator finds no place for it. A
// pod wanted running may be found unschedulable on the way (the scheduler
// tries it again as its informers catch up): only its last state counts.
func runPod(ctx context.Context, t testing.TB, client kubernetes.Interface, pod *v1.Pod, want podOutcome) (podOutcome, *v1.Pod) {
	t.Helper()
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got podOutcome
	var last *v1.Pod
	seen := map[string]bool{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last, got = p, ""
		if p.Status.Phase == v1.PodRunning {
			got = outcomeRunning
			return true, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				got = outcomeUnschedulable
				if want == outcomeUnschedulable && strings.Contains(c.Message, allocatorVerdict) {
					return true, nil
				}
				if !seen[c.Message] {
					seen[c.Message] = true
					t.Logf("pod %s unschedulable on the way: %s", pod.Name, c.Message)
				}
			}
		}
		return false, nil
	})
	switch {
	case err == nil:
	case got == outcomeUnschedulable && want == outcomeRunning:
		t.Logf("pod %s still unschedulable after %v: %s", pod.Name, 2*time.Minute, podScheduledMessage(last))
	case last == nil:
		t.Fatalf("waiting for pod %s: %v", pod.Name, err)
	default:
		t.Fatalf("waiting for pod %s to be %s: %v; last status: %+v", pod.Name, want, err, last.Status)
	}
	return got, last
}

// waitPodRunning waits for a pod that was unschedulable to run.
func waitPodRunning(ctx context.Context, t testing.TB, client kubernetes.Interface, namespace, name string) {
	t.Helper()
	var phase v1.PodPhase
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == v1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s to run: %v (phase %s)", name, err, phase)
	}
}

// deletePods deletes pods and waits until their claims are gone, so that
// what they held is free.
func deletePods(ctx context.Context, t testing.TB, client kubernetes.Interface, namespace string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := client.CoreV1().Pods(namespace).Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	var left int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = 0
		for _, p := range pods.Items {
			if slices.Contains(names, p.Name) {
				left++
			}
		}
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("waiting for pods %v and their claims to go: %v (%d left)", names, err, left)
	}
}

// podClaim returns the allocated claim of a pod's one claim.
func podClaim(ctx context.Context, t testing.TB, client kubernetes.Interface, pod *v1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		c, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s of pod %s: allocation %+v", c.Name, pod.Name, c.Status.Allocation)
		}
		return c
	}
	t.Fatalf("pod %s has no claim", pod.Name)
	return nil
}

// podEnv is a running pod's environment: on a hollow node, its log.
func podEnv(ctx context.Context, t testing.TB, client kubernetes.Interface, namespace, name string) string {
	t.Helper()
	var env string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		data, err := client.CoreV1().Pods(namespace).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		env = string(data)
		return err == nil && strings.Contains(env, gpu.EnvPrefix+"_0="), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s's log to show its GPU: %v; log: %s", name, err, env)
	}
	return env
}

func testMIG(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	const profile = "1g.10gb"
	p := publishedPool(ctx, t, client, migNode)
	want, why := p.fitting(func(d resourceapi.Device) bool { return deviceAttr(d, gpu.AttrProfile) == profile })
	t.Logf("%d %s devices fit at once (%s)", want, profile, why)
	if want != 7 {
		t.Fatalf("the published counters allow %d %s devices on an H100 (%s), want 7", want, profile, why)
	}
	ns := createNamespace(ctx, t, client, "mig")
	sel := fmt.Sprintf(`has(device.attributes[%q].profile) && device.attributes[%q].profile == %q`, gpu.DriverName, gpu.DriverName, profile)
	for _, tmpl := range []*resourceapi.ResourceClaimTemplate{
		scratchlab.ClaimTemplate(ns, "small", gpu.ClassMIG, sel, ""),
		scratchlab.ClaimTemplate(ns, "whole", "h100."+gpu.DriverName, "", ""),
	} {
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var names []string
	devices := map[string]string{}
	for i := range want {
		name := fmt.Sprintf("small-%d", i)
		names = append(names, name)
		got, pod := runPod(ctx, t, client, scratchlab.ClaimPod(ns, name, "small"), outcomeRunning)
		if got != outcomeRunning {
			t.Fatalf("pod %s of %d: %s, want %s", name, want, got, outcomeRunning)
		}
		r := podClaim(ctx, t, client, pod).Status.Allocation.Devices.Results[0]
		if other, dup := devices[r.Device]; dup {
			t.Errorf("pods %s and %s both got %s", other, name, r.Device)
		}
		devices[r.Device] = name
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range p.devices {
		byName[d.Name] = d
	}
	for name, pod := range devices {
		if got := deviceAttr(byName[name], gpu.AttrProfile); got != profile {
			t.Errorf("pod %s got %s, a %q device, want %s", pod, name, got, profile)
		}
	}
	migDevice := byName[slices.Sorted(maps.Keys(devices))[0]]
	env := podEnv(ctx, t, client, ns, devices[migDevice.Name])
	for _, line := range []string{
		gpu.EnvPrefix + "_0=" + migDevice.Name,
		gpu.EnvPrefix + "_0_PROFILE=" + profile,
		gpu.EnvPrefix + "_0_PARENT_UUID=" + deviceAttr(migDevice, gpu.AttrParentUUID),
	} {
		if !strings.Contains(env, line+"\n") {
			t.Errorf("pod %s's environment lacks %s:\n%s", devices[migDevice.Name], line, env)
		}
	}

	got, pod := runPod(ctx, t, client, scratchlab.ClaimPod(ns, "small-extra", "small"), outcomeUnschedulable)
	if got != outcomeUnschedulable {
		t.Fatalf("pod %d of %s: %s, want %s", want+1, profile, got, outcomeUnschedulable)
	}
	t.Logf("pod %d: %s", want+1, podScheduledMessage(pod))
	// Out of the way: once slices are free, the whole GPU must win them.
	deletePods(ctx, t, client, ns, "small-extra")

	got, pod = runPod(ctx, t, client, scratchlab.ClaimPod(ns, "whole", "whole"), outcomeUnschedulable)
	if got != outcomeUnschedulable {
		t.Fatalf("a whole-GPU pod beside %d MIG devices: %s, want %s", want, got, outcomeUnschedulable)
	}
	t.Logf("whole GPU beside MIG devices: %s", podScheduledMessage(pod))
	deletePods(ctx, t, client, ns, names...)
	waitPodRunning(ctx, t, client, ns, "whole")
}

func podScheduledMessage(p *v1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// memoryShares computes from a shared device how many claims asking for memory
// fit it: each request is rounded up as the device's request policy says,
// and together they may take its memory.
func memoryShares(t testing.TB, d resourceapi.Device, memory string) (int, resource.Quantity) {
	t.Helper()
	c := d.Capacity[gpu.CapacityMemory]
	q := resource.MustParse(memory)
	if pol := c.RequestPolicy; pol != nil && pol.ValidRange != nil {
		r := pol.ValidRange
		lo, step := r.Min.Value(), int64(1)
		if r.Step != nil {
			step = r.Step.Value()
		}
		v := max(q.Value(), lo)
		v = lo + (v-lo+step-1)/step*step
		if r.Max != nil && v > r.Max.Value() {
			return 0, q
		}
		q = *resource.NewQuantity(v, resource.BinarySI)
	}
	return int(c.Value.Value() / q.Value()), q
}

func testSharing(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	p := publishedPool(ctx, t, client, sharedNode)
	if len(p.devices) != 1 || !ptr.Deref(p.devices[0].AllowMultipleAllocations, false) {
		t.Fatalf("node %s publishes %+v, want one shared GPU", sharedNode, p.devices)
	}
	l4 := p.devices[0]
	// 24 GB is 23034Mi as NVML reports it: two 8Gi shares fit, not three.
	if n, _ := memoryShares(t, l4, "8Gi"); n != 2 {
		t.Errorf("%d shares of 8Gi fit the L4's %s, want 2", n, ptr.To(l4.Capacity[gpu.CapacityMemory].Value).String())
	}
	const memory = "7Gi"
	want, each := memoryShares(t, l4, memory)
	t.Logf("%d shares of %s (%s each) fit the L4's %s", want, memory, each.String(), ptr.To(l4.Capacity[gpu.CapacityMemory].Value).String())
	if want != 3 {
		t.Fatalf("%d shares of %s fit an L4 24GB, want 3", want, memory)
	}
	ns := createNamespace(ctx, t, client, "sharing")
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "share", "l4."+gpu.DriverName, "", memory), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shareIDs := map[string]string{}
	for i := range want {
		name := fmt.Sprintf("share-%d", i)
		got, pod := runPod(ctx, t, client, scratchlab.ClaimPod(ns, name, "share"), outcomeRunning)
		if got != outcomeRunning {
			t.Fatalf("pod %s of %d: %s, want %s", name, want, got, outcomeRunning)
		}
		r := podClaim(ctx, t, client, pod).Status.Allocation.Devices.Results[0]
		consumed := r.ConsumedCapacity[gpu.CapacityMemory]
		if r.ShareID == nil || r.Device != l4.Name || consumed.Cmp(each) != 0 {
			t.Fatalf("pod %s got %s, share %v, consumed %v; want a share of %s of %s", name, r.Device, r.ShareID, r.ConsumedCapacity, each.String(), l4.Name)
		}
		id := string(*r.ShareID)
		if other, dup := shareIDs[id]; dup {
			t.Errorf("pods %s and %s have the same share %s", other, name, id)
		}
		shareIDs[id] = name
		env := podEnv(ctx, t, client, ns, name)
		for _, line := range []string{gpu.EnvPrefix + "_0=" + l4.Name, gpu.EnvPrefix + "_0_MEMORY_LIMIT=" + each.String(), gpu.EnvPrefix + "_0_SHARE_ID=" + id} {
			if !strings.Contains(env, line+"\n") {
				t.Errorf("pod %s's environment lacks %s:\n%s", name, line, env)
			}
		}
	}
	got, pod := runPod(ctx, t, client, scratchlab.ClaimPod(ns, "share-extra", "share"), outcomeUnschedulable)
	if got != outcomeUnschedulable {
		t.Fatalf("pod %d asking %s of the L4: %s, want %s", want+1, memory, got, outcomeUnschedulable)
	}
	t.Logf("pod %d: %s", want+1, podScheduledMessage(pod))
}

// BenchmarkSchedulingMIG measures the time from a pod's creation to its
// binding (PodScheduled) for pods with a 1g.10gb MIG claim and for pods
// with a whole-GPU claim, on the same lab: a node of eight H100s
// partitioned with MIG, where the allocator weighs 19 devices and a
// counter set per GPU. Each round creates eight claims, then eight pods of
// one kind, one at a time, each once the one before is bound; pods and
// claims go between rounds. The claims exist before their pods, so that the time is
// the scheduler's, not the claim controller's (with claim templates, a
// pod first waits for its claim, about a second on the lab).
//
//	go test ./lab -run '^$' -bench SchedulingMIG -benchtime 5x
func BenchmarkSchedulingMIG(b *testing.B) {
	const gpus, batch = 8, 8
	bin := binary(b)
	ctx := context.Background()
	_, _, client := upLab(ctx, b, stateRoot(b), bin, splitConfig(b, "b-split", gpus))
	publishedPool(ctx, b, client, migNode)
	ns := createNamespace(ctx, b, client, "bench")
	sel := fmt.Sprintf(`has(device.attributes[%q].profile) && device.attributes[%q].profile == "1g.10gb"`, gpu.DriverName, gpu.DriverName)
	templates := map[string]*resourceapi.ResourceClaimTemplate{
		"mig":   scratchlab.ClaimTemplate(ns, "mig", gpu.ClassMIG, sel, ""),
		"whole": scratchlab.ClaimTemplate(ns, "whole", "h100."+gpu.DriverName, "", ""),
	}
	for _, kind := range []string{"mig", "whole"} {
		b.Run(kind, func(b *testing.B) {
			var total time.Duration
			pods := 0
			for i := range b.N {
				var names []string
				for j := range batch {
					names = append(names, fmt.Sprintf("%s-%d-%d", kind, i, j))
				}
				b.StopTimer()
				for _, n := range names {
					claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}, Spec: templates[kind].Spec.Spec}
					if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				total += scheduleEach(ctx, b, client, ns, names)
				pods += len(names)
				b.StopTimer()
				deletePods(ctx, b, client, ns, names...)
				for _, n := range names {
					if err := client.ResourceV1().ResourceClaims(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(pods), "ms/pod")
		})
	}
}

// scheduleEach creates pods, each with the claim of its name, one at a
// time, and returns the sum of their times from creation to binding, as a
// watch sees them.
func scheduleEach(ctx context.Context, b *testing.B, client kubernetes.Interface, ns string, names []string) time.Duration {
	b.Helper()
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var sum time.Duration
	timeout := time.After(2 * time.Minute)
	for _, n := range names {
		pod := scratchlab.ClaimPod(ns, n, "")
		pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(n)}
		start := time.Now()
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for bound := false; !bound; {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatalf("the watch of namespace %s ended before pod %s was bound", ns, n)
				}
				p, isPod := ev.Object.(*v1.Pod)
				if !isPod || p.Name != n {
					continue
				}
				for _, c := range p.Status.Conditions {
					if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue {
						bound = true
						sum += time.Since(start)
					}
					if c.Type == v1.PodScheduled && c.Reason == v1.PodReasonUnschedulable {
						b.Fatalf("pod %s is outcomeUnschedulable: %s", p.Name, c.Message)
					}
				}
			case <-timeout:
				b.Fatalf("waiting 2m for pods %v to be bound, one at a time: stuck at %s", names, n)
			}
		}
	}
	return sum
}
