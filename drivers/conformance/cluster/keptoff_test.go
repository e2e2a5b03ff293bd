package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
)

// On a node tainted as cloud GPU pools are, a check whose pod does not
// tolerate the taint is not verified, the cluster's, naming the taint and
// the node, at once (not at the pod-running timeout), and never the
// driver's failure; given the toleration, it passes. Where the claims fit
// no node at all, the taint is not the reason: the check fails.
func TestTaintedNodesAreTheClusters(t *testing.T) {
	gpuTaint := v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule}
	toleration, err := manifest.ParseToleration("nvidia.com/gpu=present:NoSchedule")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		devices     int
		tolerations []v1.Toleration
		proofPod    *manifest.ProofPod
		status      results.Status
		says        []string
	}{
		{name: "not tolerated", devices: 2, status: results.Skipped,
			says: []string{results.KeptOffPrefix, "the cluster keeps pod one off node-a, where its claims fit: taint nvidia.com/gpu=present:NoSchedule not tolerated (node-a)", "--toleration"}},
		{name: "tolerated by --toleration", devices: 2, tolerations: []v1.Toleration{toleration}, status: results.Passed},
		{name: "tolerated by the manifest", devices: 2, proofPod: &manifest.ProofPod{Tolerations: []v1.Toleration{{Key: "nvidia.com/gpu", Operator: v1.TolerationOpExists}}}, status: results.Passed},
		{name: "no device anywhere", devices: 0, status: results.Failed, says: []string{"waited"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(c.devices, false))
			f.taintNode(t, gpuTaint)
			k.m.Timeouts.PodRunning = 8 * time.Second
			k.o.Tolerations = c.tolerations
			k.m.ProofPod = c.proofPod
			start := time.Now()
			status, msg := k.verdict("single device", k.singleDevice(context.Background(), t.Logf, k))
			took := time.Since(start)
			t.Logf("%s %s", status, msg)
			if status != c.status {
				t.Fatalf("%s: %s; want %s", status, msg, c.status)
			}
			for _, w := range c.says {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			if c.status == results.Skipped && took > 4*time.Second {
				t.Errorf("not verified after %v; the scheduler's refusal was in within a second", took.Round(time.Millisecond))
			}
			if err := k.cleanup(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
}

// A pod the check itself places (node affinity on a node's name) is kept
// off the other nodes by design: where its claims fit only there, the
// refusal is not the cluster's. Placed on the tainted node where they fit,
// it is; and a node selector from the manifest's proofPod is the cluster's
// too, kept beside the check's placement.
func TestKeptOffOnlyWhereTheCheckPlacesThePod(t *testing.T) {
	ctx := context.Background()
	f, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(2, false))
	f.taintNode(t, v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule})
	if _, err := f.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.m.ProofPod = &manifest.ProofPod{NodeSelector: map[string]string{"pool": "gpu"}}
	for _, c := range []struct {
		pod, node, says string
	}{
		{pod: "elsewhere", node: "node-b"},
		{pod: "there", node: fakeNode, says: "the cluster keeps pod there off node-a, where its claims fit: left out by the pod's nodeSelector or node affinity (node-a); taint nvidia.com/gpu=present:NoSchedule not tolerated (node-a)"},
	} {
		if err := k.createClaim(ctx, c.pod, k.request("gpu")); err != nil {
			t.Fatal(err)
		}
		if err := k.pod(ctx, c.pod, []string{c.pod}, onNodes([]string{c.node})); err != nil {
			t.Fatal(err)
		}
		pod, err := f.client.CoreV1().Pods(k.ns).Get(ctx, c.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeSelector["pool"] != "gpu" {
			t.Errorf("pod %s: node selector %v; want the proofPod's beside the check's placement", c.pod, pod.Spec.NodeSelector)
		}
		got, err := k.keptOffBy(ctx, c.pod)
		if err != nil || c.says == "" && got != "" || !strings.HasPrefix(got, c.says) {
			t.Errorf("pod %s, placed on %s: %q, %v; want %q", c.pod, c.node, got, err, c.says)
		}
	}
}
