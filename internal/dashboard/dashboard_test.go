package dashboard_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/nodedrivers"
)

const driver = gpu.DriverName

func gpuDevice(name, product string) resourceapi.Device {
	return resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"productName": {StringValue: ptr.To(product)}, gpu.AttrType: {StringValue: ptr.To(gpu.TypeGPU)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{gpu.CapacityMemory: {Value: resource.MustParse("80Gi")}},
	}
}

// cluster is a node of three H100s (one held by pod train-0, one tainted)
// and an L4 node, a counted node, and a pod that waits.
func cluster() []runtime.Object {
	tainted := gpuDevice("gpu-2", "NVIDIA H100 80GB HBM3")
	tainted.Taints = []resourceapi.DeviceTaint{{Key: gpu.TaintKeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute}}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To("gpu-h100"), Pool: resourceapi.ResourcePool{Name: "gpu-h100", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{gpuDevice("gpu-0", "NVIDIA H100 80GB HBM3"), gpuDevice("gpu-1", "NVIDIA H100 80GB HBM3"), tainted}},
	}
	l4 := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-l4-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To("gpu-l4"), Pool: resourceapi.ResourcePool{Name: "gpu-l4", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{gpuDevice("gpu-0", "NVIDIA L4")}},
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "train-0-gpu"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu/h100", Driver: driver, Pool: "gpu-h100", Device: "gpu-1"}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-0", UID: "u0"}}
	pod := func(name, node string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name, UID: types.UID("u-" + name)}, Spec: v1.PodSpec{NodeName: node,
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu")}}}}
		if node != "" {
			p.Status.Phase = v1.PodRunning
		} else {
			p.Status.Phase = v1.PodPending
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "0/3 nodes are available: cannot allocate all claims."}}
		}
		return p
	}
	counted := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "count-h100", Labels: map[string]string{gpu.NodeProfileLabel: "h100-80gb"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{gpu.ExtendedResource: resource.MustParse("2")}}}
	return []runtime.Object{slice, l4, claim, pod("train-0", "gpu-h100"), pod("late-0", ""), counted,
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "late-0-gpu"}}}
}

// build is the page of a fake cluster of the objects, read as the report
// reads a cluster.
func build(t *testing.T, objects ...runtime.Object) *dashboard.Page {
	t.Helper()
	snap, err := allocation.Read(context.Background(), fake.NewClientset(objects...), metav1.NamespaceAll, nodedrivers.Vocabulary)
	if err != nil {
		t.Fatal(err)
	}
	p, err := dashboard.Build(context.Background(), "lab", snap)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuild(t *testing.T) {
	p := build(t, cluster()...)
	var got []string
	for _, n := range p.Nodes {
		if n.Counted {
			got = append(got, n.Name+" counted "+n.CountedTier)
		}
		for _, d := range n.Devices {
			s := n.Name + "/" + d.Name + " " + d.Tier + " " + strings.Join(d.States, ",")
			for _, h := range d.Holders {
				s += " " + strings.Join(h.Pods, ",")
			}
			got = append(got, s)
		}
	}
	want := []string{
		"count-h100 counted h100",
		"gpu-h100/gpu-0 h100 free",
		"gpu-h100/gpu-1 h100 allocated work/train-0",
		"gpu-h100/gpu-2 h100 free,tainted",
		"gpu-l4/gpu-0 l4 free",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tiles:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(p.Pending) != 1 || p.Pending[0].Pod != "work/late-0" || p.Pending[0].Reason == "" {
		t.Errorf("pending %+v, want work/late-0 with a reason", p.Pending)
	}
}

func newServer(t *testing.T, client *fake.Clientset) *httptest.Server {
	return metricsServer(t, client, nil)
}

// Without the token: 401 and not a word of the cluster.
func TestTokenRequired(t *testing.T) {
	srv := newServer(t, fake.NewClientset(cluster()...))
	for _, path := range []string{"/", "/?token=wrong", "/view", "/events?token=", "/?token=s3cret%20"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "gpu-") || strings.Contains(string(body), "train") {
			t.Errorf("GET %s: %d %q, want 401 and no data", path, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(srv.URL + "/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `data-device="gpu.dralab.dev/gpu-h100/gpu-1"`) {
		t.Errorf("GET with the token: %d\n%s", resp.StatusCode, body)
	}
}

// A change reaches a subscriber as an event with the new view.
func TestEventsFollowTheCluster(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	srv := newServer(t, client)
	resp, err := http.Get(srv.URL + "/events?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	late, err := client.CoreV1().Pods("work").Get(context.Background(), "late-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The fake clientset's watch does not replay what happened between
	// an informer's list and its watch: a deletion in that gap is never
	// seen. Until an event comes, the pod is created and deleted again,
	// each deletion a change the watch, once it runs, does see.
	deleteLate := func() {
		ctx := context.Background()
		if err := client.CoreV1().Pods("work").Delete(ctx, "late-0", metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
	deleteLate()
	events := make(chan string)
	go func() {
		r := bufio.NewReader(resp.Body)
		var ev strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(events)
				return
			}
			if line == "\n" {
				events <- ev.String()
				ev.Reset()
				continue
			}
			ev.WriteString(strings.TrimPrefix(line, "data: "))
		}
	}()
	deadline := time.After(30 * time.Second)
	again := time.NewTicker(time.Second)
	defer again.Stop()
	for {
		select {
		case ev := <-events:
			if strings.Contains(ev, "data-device=") && !strings.Contains(ev, "late-0") {
				return
			}
		case <-again.C:
			recreated := late.DeepCopy()
			recreated.ResourceVersion = ""
			if _, err := client.CoreV1().Pods("work").Create(context.Background(), recreated, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			deleteLate()
		case <-deadline:
			t.Fatal("no event without the deleted pod within 30 s")
		}
	}
}
