package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

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
