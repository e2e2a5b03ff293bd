package dashboard_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
)

// pairCluster is a node, gpu-nic, of two GPUs and two NICs, GPU i and NIC
// i under one PCIe root and on NUMA node i (the GPUs name it numa, the
// NICs numaNode). Pod pair-0's claim holds gpu-0 and nic-0, matched on
// pcieRoot; pod numa-1's holds gpu-1 and nic-1, matched on derived/numa,
// which each request computes from its own driver's attribute.
func pairCluster() []runtime.Object {
	const node = "gpu-nic"
	dev := func(name string, numa resourceapi.QualifiedName, i int64, root string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(root)},
			numa:                              {IntValue: ptr.To(i)},
		}}
	}
	gpus := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{dev("gpu-0", "numa", 0, "pci0000:15"), dev("gpu-1", "numa", 1, "pci0000:96")}},
	}
	nics := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-nics"},
		Spec: resourceapi.ResourceSliceSpec{Driver: fakenic.DriverName, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{dev("nic-0", "resource.kubernetes.io/numaNode", 0, "pci0000:15"), dev("nic-1", "resource.kubernetes.io/numaNode", 1, "pci0000:96")}},
	}
	claim := func(name string, i string, derive bool, attr resourceapi.FullyQualifiedName) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name}}
		gpu := resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.dralab.dev"}
		nic := resourceapi.ExactDeviceRequest{DeviceClassName: "nic.dralab.dev"}
		if derive {
			gpu.DerivedAttributes = []resourceapi.DeviceDerivedAttribute{{Name: attr, Expression: `device.attributes["gpu.dralab.dev"].numa`}}
			nic.DerivedAttributes = []resourceapi.DeviceDerivedAttribute{{Name: attr, Expression: `device.attributes["resource.kubernetes.io"].numaNode`}}
		}
		c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &gpu}, {Name: "nic", Exactly: &nic}}
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic"}, MatchAttribute: ptr.To(attr)}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: driver, Pool: node, Device: "gpu-" + i},
			{Request: "nic", Driver: fakenic.DriverName, Pool: node, Device: "nic-" + i},
		}}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: types.UID("u-" + name)}}
		return c
	}
	pod := func(name string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name}, Spec: v1.PodSpec{NodeName: node,
			ResourceClaims: []v1.PodResourceClaim{{Name: "devices", ResourceClaimName: ptr.To(name)}}}}
		p.Status.Phase = v1.PodRunning
		return p
	}
	return []runtime.Object{gpus, nics,
		claim("pair-0", "0", false, "resource.kubernetes.io/pcieRoot"), pod("pair-0"),
		claim("numa-1", "1", true, "derived/numa"), pod("numa-1")}
}

// Each device of a pair says what it is aligned on and with what: the
// attribute's value for it (a derived attribute's computed from the
// request's expression) and the other device.
func TestBuildPairs(t *testing.T) {
	p := build(t, pairCluster()...)
	aligned := map[string][]string{}
	for _, n := range p.Nodes {
		for _, d := range n.Devices {
			for _, h := range d.Holders {
				aligned[d.Ref] = append(aligned[d.Ref], h.Aligned...)
			}
		}
	}
	for ref, want := range map[string]string{
		driver + "/gpu-nic/gpu-0":             "resource.kubernetes.io/pcieRoot pci0000:15, with nic-0",
		fakenic.DriverName + "/gpu-nic/nic-0": "resource.kubernetes.io/pcieRoot pci0000:15, with gpu-0",
		driver + "/gpu-nic/gpu-1":             "derived/numa 1, with nic-1",
		fakenic.DriverName + "/gpu-nic/nic-1": "derived/numa 1, with gpu-1",
	} {
		if !slices.Equal(aligned[ref], []string{want}) {
			t.Errorf("%s is aligned %q, want %q", ref, aligned[ref], want)
		}
	}
}

// In a real browser, a GPU's holder says which NIC it is paired with and
// on what, on a line of its own under the pod.
func TestDashboardPairsInABrowser(t *testing.T) {
	b := browsertest.New(t)
	srv := newServer(t, fake.NewClientset(pairCluster()...))
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/?token=s3cret")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	const gpu0 = `li.device[data-device="gpu.dralab.dev/gpu-nic/gpu-0"] li.holder`
	if _, err := chromedp.Run(ctx, chromedp.WaitVisible(gpu0+` .aligned`)); err != nil {
		t.Fatalf("waiting for gpu-0's pair: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(gpu0+` .aligned`))
	if err != nil || strings.TrimSpace(text) != "aligned on resource.kubernetes.io/pcieRoot pci0000:15, with nic-0" {
		t.Errorf("gpu-0's pair reads %q (%v)", text, err)
	}
	// On a line of its own, below the pod's name.
	below, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(function () {
	  var h = document.querySelector('`+gpu0+`');
	  var a = h.querySelector('.aligned').getBoundingClientRect();
	  var first = document.createRange(); first.setStart(h.firstChild, 0); first.setEnd(h.firstChild, 1);
	  return a.height > 0 && a.top >= first.getBoundingClientRect().bottom - 1;
	})()`))
	if err != nil || !below {
		t.Errorf("gpu-0's pair is not on a line of its own below the pod (%v)", err)
	}
	nic1, err := chromedp.Run(ctx, chromedp.Text(`li.device[data-device="nic.dralab.dev/gpu-nic/nic-1"] li.holder .aligned`))
	if err != nil || strings.TrimSpace(nic1) != "aligned on derived/numa 1, with gpu-1" {
		t.Errorf("nic-1's pair reads %q (%v)", nic1, err)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
}
