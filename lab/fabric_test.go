package lab_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/harness/scratchlab"
)

// TestNetworkAttachedDevices runs lab/examples/racks.yaml: three enclosures
// of network-attached GPUs, published once for all their nodes with a
// slice nodeSelector (rack a's), allNodes (shared) and per-device node
// selection (split: one GPU cabled to rack a, one to rack b). The real
// scheduler places each pod where its claim's devices are reached: rack a's
// GPUs only on rack a's nodes, two at most at once, wherever they run; the
// split enclosure's second GPU only on rack b's node; a claim of an L4 in
// the node and a GPU of rack a's enclosure only on the one node that has
// both. Each node's plugin prepares the devices: the container gets them.
func TestNetworkAttachedDevices(t *testing.T) {
	ctx := context.Background()
	cfg := exampleConfig(t, "racks.yaml", "t-racks")
	_, _, client := upLab(ctx, t, stateRoot(t), binary(t), cfg)

	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, fabric.DriverName).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	reach := map[string]string{}
	for _, s := range list.Items {
		switch {
		case s.Spec.NodeName != nil:
			t.Errorf("slice %s of pool %s is node %s's: a node publishes none of the enclosures' devices", s.Name, s.Spec.Pool.Name, *s.Spec.NodeName)
		case s.Spec.NodeSelector != nil:
			reach[s.Spec.Pool.Name] = fabric.ReachNodeSelector
		case ptr.Deref(s.Spec.AllNodes, false):
			reach[s.Spec.Pool.Name] = fabric.ReachAllNodes
		case ptr.Deref(s.Spec.PerDeviceNodeSelection, false):
			reach[s.Spec.Pool.Name] = fabric.ReachPerDevice
		}
	}
	if want := map[string]string{"rack-a": fabric.ReachNodeSelector, "shared": fabric.ReachAllNodes, "split": fabric.ReachPerDevice, "composable": fabric.ReachAllNodes}; !maps.Equal(reach, want) {
		t.Fatalf("published pools %v, want %v", reach, want)
	}

	ns := createNamespace(ctx, t, client, "racks")
	enclosure := func(name, extra string) string {
		return `device.attributes["` + fabric.DriverName + `"].enclosure == "` + name + `"` + extra
	}
	for name, sel := range map[string]string{
		"rack-a":  enclosure("rack-a", ""),
		"split-1": enclosure("split", ` && device.attributes["`+fabric.DriverName+`"].index == 1`),
		"shared":  enclosure("shared", ""),
	} {
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, name, fabric.DriverName, sel, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	both := scratchlab.ClaimTemplate(ns, "l4-and-rack-a", gpu.Tiers[2].ClassName(), "", "")
	both.Spec.Spec.Devices.Requests = append(both.Spec.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "fabric", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: fabric.DriverName,
		Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: enclosure("rack-a", "")}}},
	}})
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, both, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a rack's enclosure, on the rack's nodes only", func(t *testing.T) {
		var names []string
		for _, name := range []string{"rack-a-0", "rack-a-1"} {
			createPod(ctx, t, client, scratchlab.ClaimPod(ns, name, "rack-a"))
			names = append(names, name)
		}
		used := map[string]bool{}
		for _, name := range names {
			waitPodRunning(ctx, t, client, ns, name)
			p := getPod(ctx, t, client, ns, name)
			r := podClaim(ctx, t, client, p).Status.Allocation.Devices.Results[0]
			if p.Spec.NodeName != "a1" && p.Spec.NodeName != "a2" {
				t.Errorf("pod %s with rack a's %s runs on %s, outside rack a", name, r.Device, p.Spec.NodeName)
			}
			if r.Pool != "rack-a" || used[r.Device] {
				t.Errorf("pod %s got %s/%s (given: %v)", name, r.Pool, r.Device, used)
			}
			used[r.Device] = true
			if env := podLog(ctx, t, client, ns, name, fabric.EnvPrefix+"_0="+r.Device); !strings.Contains(env, fabric.EnvPrefix+"_0_ENCLOSURE=rack-a") {
				t.Errorf("pod %s's environment lacks its enclosure:\n%s", name, env)
			}
		}
		// Both of the enclosure's GPUs are held, whichever nodes hold
		// them: a third pod waits.
		createPod(ctx, t, client, scratchlab.ClaimPod(ns, "rack-a-2", "rack-a"))
		time.Sleep(5 * time.Second)
		if p := getPod(ctx, t, client, ns, "rack-a-2"); p.Spec.NodeName != "" {
			t.Errorf("a third pod of rack a's two GPUs was bound to %s", p.Spec.NodeName)
		}
		deletePods(ctx, t, client, ns, "rack-a-0")
		waitPodRunning(ctx, t, client, ns, "rack-a-2")
		deletePods(ctx, t, client, ns, "rack-a-1", "rack-a-2")
	})

	t.Run("a device cabled to another rack, on that rack's node", func(t *testing.T) {
		createPod(ctx, t, client, scratchlab.ClaimPod(ns, "split-1", "split-1"))
		waitPodRunning(ctx, t, client, ns, "split-1")
		p := getPod(ctx, t, client, ns, "split-1")
		if r := podClaim(ctx, t, client, p).Status.Allocation.Devices.Results[0]; p.Spec.NodeName != "b1" || r.Device != "split-gpu-1" {
			t.Errorf("split's GPU 1 (rack b): got %s on %s, want split-gpu-1 on b1", r.Device, p.Spec.NodeName)
		}
		deletePods(ctx, t, client, ns, "split-1")
	})

	t.Run("a node's GPU and an enclosure's, where both are", func(t *testing.T) {
		createPod(ctx, t, client, scratchlab.ClaimPod(ns, "both", "l4-and-rack-a"))
		waitPodRunning(ctx, t, client, ns, "both")
		p := getPod(ctx, t, client, ns, "both")
		var got []string
		if len(p.Status.ResourceClaimStatuses) != 1 {
			t.Fatalf("pod both: claims %+v", p.Status.ResourceClaimStatuses)
		}
		claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			got = append(got, r.Driver+"/"+r.Pool)
		}
		slices.Sort(got)
		if want := []string{fabric.DriverName + "/rack-a", gpu.DriverName + "/a1"}; p.Spec.NodeName != "a1" || !slices.Equal(got, want) {
			t.Errorf("an L4 and a GPU of rack a: %v on %s, want %v on a1 (b1's L4 is in rack b)", got, p.Spec.NodeName, want)
		}
		deletePods(ctx, t, client, ns, "both")
	})

	t.Run("attached before binding: a failure, a timeout, then attached", func(t *testing.T) {
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "composable", fabric.DriverName, enclosure("composable", ""), ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		createPod(ctx, t, client, scratchlab.ClaimPod(ns, "composed", "composable"))
		waitBound(ctx, t, client, ns, "composed", start)
		waitPodRunning(ctx, t, client, ns, "composed")
		p := getPod(ctx, t, client, ns, "composed")
		claim := podClaim(ctx, t, client, p)
		r := claim.Status.Allocation.Devices.Results[0]
		t.Logf("composable-gpu-2 attached to %s, the pod Running after %v", p.Spec.NodeName, time.Since(start).Round(time.Second))
		if r.Device != "composable-gpu-2" || !slices.Equal(r.BindingConditions, []string{fabric.ConditionAttached}) {
			t.Errorf("allocated %s (binding conditions %v), want composable-gpu-2, attached", r.Device, r.BindingConditions)
		}
		// bindsToNode: the allocation is the chosen node's alone.
		if sel := claim.Status.Allocation.NodeSelector; sel == nil || len(sel.NodeSelectorTerms) != 1 || len(sel.NodeSelectorTerms[0].MatchFields) != 1 || !slices.Equal(sel.NodeSelectorTerms[0].MatchFields[0].Values, []string{p.Spec.NodeName}) {
			t.Errorf("allocation node selector %+v, want the pod's node %s alone", sel, p.Spec.NodeName)
		}
		if c := deviceCondition(claim, r, fabric.ConditionAttached); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("claim status.devices %+v: want %s True", claim.Status.Devices, fabric.ConditionAttached)
		}
		if elapsed := time.Since(start); elapsed < 20*time.Second {
			t.Errorf("Running after %v, before the binding timeout (20 s) of the GPU that never answers", elapsed)
		}
		published, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tainted := map[string]bool{}
		for _, s := range published.Items {
			for _, d := range s.Spec.Devices {
				if s.Spec.Pool.Name == "composable" && len(d.Taints) > 0 && d.Taints[0].Key == fabric.TaintAttachFailed {
					tainted[d.Name] = true
				}
			}
		}
		if !maps.Equal(tainted, map[string]bool{"composable-gpu-0": true, "composable-gpu-1": true}) {
			t.Errorf("tainted %v, want the GPU that failed and the one that never answered", tainted)
		}
		deletePods(ctx, t, client, ns, "composed")
	})

	t.Run("an enclosure every node reaches", func(t *testing.T) {
		createPod(ctx, t, client, scratchlab.ClaimPod(ns, "shared", "shared"))
		waitPodRunning(ctx, t, client, ns, "shared")
		p := getPod(ctx, t, client, ns, "shared")
		if r := podClaim(ctx, t, client, p).Status.Allocation.Devices.Results[0]; r.Pool != "shared" {
			t.Errorf("got %s/%s, want the shared enclosure's", r.Pool, r.Device)
		}
		deletePods(ctx, t, client, ns, "shared")
	})
}

// podLog waits for a running pod's log (on a hollow node, its environment)
// to hold want, and returns it.
func podLog(ctx context.Context, t testing.TB, client kubernetes.Interface, namespace, name, want string) string {
	t.Helper()
	var log string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		data, err := client.CoreV1().Pods(namespace).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		if log = string(data); err == nil && strings.Contains(log, want) {
			return log
		}
	}
	t.Fatalf("pod %s's log lacks %s:\n%s", name, want, log)
	return ""
}
