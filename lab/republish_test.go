package lab_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// TestPoolRepublish runs allocation across a pool's move to its next
// generation: a node of two MIG H100s publishes its pool four devices a
// slice, its driver's slice writes a second apart. A pod holds a MIG
// device of one GPU; the other GPU fails (Xid 48: its device and its
// partitions tainted NoSchedule), and the taints, spread over several of
// the pool's slices, move the pool to its next generation, written slice
// by slice. A pod made while the pool is incomplete waits: the scheduler
// finds it unschedulable, and `kubectl dra why` names the incomplete pool;
// its claim is allocated only after the pool's last slice is written (the
// etcd revisions of the two writes say which came first), from the GPU
// that did not fail. The first pod runs on throughout, its allocation
// unchanged.
func TestPoolRepublish(t *testing.T) {
	const node = "gpu-mig"
	bin := binary(t)
	ctx := context.Background()
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: "t-republish", Nodes: []config.Node{
		{Name: node, GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Partitioning: config.PartitioningMIG, DevicesPerSlice: 4, SliceWriteInterval: "1s"}},
	}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	l, _, client := upLab(ctx, t, stateRoot(t), bin, cfg)

	p := publishedPool(ctx, t, client, node)
	uuidOf, gpuOf := map[string]string{}, map[string]string{}
	for _, d := range p.devices {
		if u := deviceAttr(d, gpu.AttrUUID); u != "" {
			uuidOf[d.Name] = u
		}
	}
	for _, d := range p.devices {
		parent := deviceAttr(d, gpu.AttrParentUUID)
		for name, u := range uuidOf {
			if u == parent || name == d.Name {
				gpuOf[d.Name] = name
			}
		}
	}
	if len(uuidOf) != 2 {
		t.Fatalf("node %s publishes the GPUs %v, want two", node, uuidOf)
	}

	ns := createNamespace(ctx, t, client, "republish")
	sel := fmt.Sprintf(`device.attributes[%q].profile == "1g.10gb"`, gpu.DriverName)
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "mig", gpu.ClassMIG, sel, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, before := runPod(ctx, t, client, scratchlab.ClaimPod(ns, "before", "mig"), outcomeRunning)
	if got != outcomeRunning {
		t.Fatalf("pod before: %s, want %s", got, outcomeRunning)
	}
	held := podClaim(ctx, t, client, before)
	kept := gpuOf[held.Status.Allocation.Devices.Results[0].Device]
	var failed string
	for name := range uuidOf {
		if name != kept {
			failed = name
		}
	}
	// The premise: the failed GPU's devices lie in more than one slice,
	// so that tainting them writes several slices, which the slice
	// controller does at the pool's next generation.
	spread := 0
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, gpu.DriverName).String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Spec.Pool.Name == node && slices.ContainsFunc(s.Spec.Devices, func(d resourceapi.Device) bool { return gpuOf[d.Name] == failed }) {
			spread++
		}
	}
	if spread < 2 {
		t.Fatalf("GPU %s's devices lie in %d slice(s) of pool %s, want several", failed, spread, node)
	}

	w := watchPool(ctx, t, client, node, list)
	if _, err := l.FailGPU(ctx, lab.GPURef{Node: node, Device: failed}, 48); err != nil {
		t.Fatal(err)
	}
	var incomplete poolState
	select {
	case incomplete = <-w.incomplete:
	case <-time.After(time.Minute):
		t.Fatalf("pool %s never went to a next generation, incomplete, within a minute of failing %s", node, failed)
	}
	t.Logf("pool %s generation %d: %d of %d slices written (revision %d)", node, incomplete.generation, incomplete.published, incomplete.count, incomplete.revision)

	// A pod made now waits for the pool, and kubectl dra says so.
	claims, err := client.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Stop()
	if _, err := client.CoreV1().Pods(ns).Create(ctx, scratchlab.ClaimPod(ns, "after", "mig"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var code, reason string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if w.complete() {
			return false, fmt.Errorf("pool %s was whole again before pod after was found waiting for it (last reason %s: %s): its slice writes are too quick for the test", node, code, reason)
		}
		s, err := allocation.Read(ctx, client, ns, allocation.Vocabulary{})
		if err != nil {
			return false, nil
		}
		i := slices.IndexFunc(s.Pods, func(p v1.Pod) bool { return p.Name == "after" })
		if i < 0 || !allocation.Unschedulable(&s.Pods[i]) {
			return false, nil
		}
		rows, err := s.PodRows(ctx, &s.Pods[i])
		if err != nil || len(rows) == 0 {
			return false, err
		}
		code, reason = rows[0].ReasonCode, rows[0].Reason
		return code == allocation.PoolIncomplete, nil
	})
	if err != nil {
		t.Fatalf("pod after, made while pool %s is incomplete: %v", node, err)
	}
	t.Logf("kubectl dra why after: %s: %s", code, reason)

	// Once the pool is whole, the pod runs: its claim allocated after
	// the pool's last slice was written, from the GPU that did not fail.
	after := waitRunning(ctx, t, client, ns, "after")
	allocatedAt := allocationRevision(ctx, t, claims, after)
	whole := w.wait(ctx, t)
	if allocatedAt <= whole.revision {
		t.Errorf("pod after's claim was allocated at revision %d, before pool %s was whole again at %d", allocatedAt, node, whole.revision)
	}
	t.Logf("pool %s whole at generation %d (revision %d); pod after's claim allocated at revision %d", node, whole.generation, whole.revision, allocatedAt)
	r := podClaim(ctx, t, client, after).Status.Allocation.Devices.Results[0]
	if gpuOf[r.Device] != kept {
		t.Errorf("pod after got %s, of GPU %s, want a device of %s: %s failed", r.Device, gpuOf[r.Device], kept, failed)
	}

	// The first pod ran on, its allocation untouched.
	now, err := client.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Status.Phase != v1.PodRunning {
		t.Errorf("pod before is %s after the republish, want Running", now.Status.Phase)
	}
	if c := podClaim(ctx, t, client, now); c.UID != held.UID || c.Status.Allocation.Devices.Results[0].Device != held.Status.Allocation.Devices.Results[0].Device {
		t.Errorf("pod before's claim changed across the republish: %v, was %v", c.Status.Allocation.Devices.Results, held.Status.Allocation.Devices.Results)
	}
}

// poolState is a pool as a watch of its slices saw it after one event:
// its newest generation, how many of that generation's slices are
// written, how many it has, and the event's etcd revision.
type poolState struct {
	generation int64
	published  int
	count      int64
	revision   uint64
	complete   bool
}

// poolWatch follows one node's GPU pool from a list of the slices on:
// incomplete receives the first state of a generation newer than the
// list's that is incomplete; whole the first one of such a generation
// that is complete.
type poolWatch struct {
	incomplete chan poolState
	mu         sync.Mutex
	whole      poolState
	done       chan struct{}
}

func (w *poolWatch) complete() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.whole.complete
}

// wait waits for the pool to be whole at its next generation.
func (w *poolWatch) wait(ctx context.Context, t testing.TB) poolState {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatal("the pool was not whole again within a minute")
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.whole
}

func watchPool(ctx context.Context, t testing.TB, client kubernetes.Interface, pool string, list *resourceapi.ResourceSliceList) *poolWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	wi, err := client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion,
		FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, gpu.DriverName).String()})
	if err != nil {
		t.Fatal(err)
	}
	slicesNow := map[string]resourceapi.ResourceSlice{}
	var first int64
	for _, s := range list.Items {
		if s.Spec.Pool.Name == pool {
			slicesNow[s.Name] = s
			first = max(first, s.Spec.Pool.Generation)
		}
	}
	w := &poolWatch{incomplete: make(chan poolState, 1), done: make(chan struct{})}
	go func() {
		defer wi.Stop()
		sentIncomplete := false
		for ev := range wi.ResultChan() {
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok || s.Spec.Pool.Name != pool {
				continue
			}
			switch ev.Type {
			case watch.Deleted:
				delete(slicesNow, s.Name)
			case watch.Added, watch.Modified:
				slicesNow[s.Name] = *s
			default:
				continue
			}
			rev, _ := strconv.ParseUint(s.ResourceVersion, 10, 64)
			st := poolState{revision: rev}
			for _, sl := range slicesNow {
				switch g := sl.Spec.Pool.Generation; {
				case g > st.generation:
					st.generation, st.published, st.count = g, 1, sl.Spec.Pool.ResourceSliceCount
				case g == st.generation:
					st.published++
				}
			}
			if st.generation <= first {
				continue
			}
			st.complete = int64(st.published) == st.count
			if !st.complete && !sentIncomplete {
				sentIncomplete = true
				w.incomplete <- st
			}
			if st.complete {
				w.mu.Lock()
				w.whole = st
				w.mu.Unlock()
				close(w.done)
				return
			}
		}
	}()
	return w
}

// waitRunning waits for a pod to run and returns it.
func waitRunning(ctx context.Context, t testing.TB, client kubernetes.Interface, namespace, name string) *v1.Pod {
	t.Helper()
	waitPodRunning(ctx, t, client, namespace, name)
	p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// allocationRevision is the etcd revision at which a watch of claims saw
// the running pod's claim first allocated.
func allocationRevision(ctx context.Context, t testing.TB, claims watch.Interface, pod *v1.Pod) uint64 {
	t.Helper()
	var name string
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			name = *st.ResourceClaimName
		}
	}
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-claims.ResultChan():
			if !ok {
				t.Fatalf("the watch of claims ended before claim %s was seen allocated", name)
			}
			c, isClaim := ev.Object.(*resourceapi.ResourceClaim)
			if isClaim && c.Name == name && c.Status.Allocation != nil {
				rev, err := strconv.ParseUint(c.ResourceVersion, 10, 64)
				if err != nil {
					t.Fatalf("claim %s's resourceVersion %q: %v", name, c.ResourceVersion, err)
				}
				return rev
			}
		case <-timeout:
			t.Fatalf("no allocation of claim %s seen within a minute", name)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}
