package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/scenarios"
)

// TestKubectlDRA installs the kubectl plugin from its module, as a user
// does (go install), and asks kubectl about the article's cascade on the
// default lab, with nothing but ~/.kube/config pointing at it: once the
// prioritized list's pods hold every DRA GPU, `kubectl dra why` of the one
// that waits names the pods that hold them (each GPU a candidate of the
// subrequest it was allocated through), and `kubectl dra devices` shows
// each GPU with its holder and the subrequest chosen for it. Then, with
// one GPU free on each of two nodes, a pod asking two of any tier is
// explained per node (NotOnOneNode, "at most 1 on any node").
func TestKubectlDRA(t *testing.T) {
	requireCluster(t)
	if theLab == nil {
		t.Skip("runs on the default lab the suite starts (no KUBECONFIG): it fills every GPU of that lab's topology")
	}
	ctx := context.Background()
	bin := t.TempDir()
	install := exec.Command("go", "install", "./cmd/kubectl-dra")
	install.Dir = "../drivers/conformance"
	install.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/kubectl-dra: %v\n%s", err, out)
	}
	home := t.TempDir()
	kubeconfig, err := os.ReadFile(theLab.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".kube", "config"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "kubectl", append([]string{"dra"}, args...)...)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl dra %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		t.Logf("kubectl dra %s:\n%s%s", strings.Join(args, " "), stderr.String(), out)
		if strings.Contains(stderr.String(), "defaults") {
			t.Errorf("kubectl dra %s did not read the lab's feature gates: %s", strings.Join(args, " "), stderr.String())
		}
		return string(out)
	}

	all, err := scenarios.All()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(s *scenarios.Scenario) bool { return s.Name == "prioritized-fallback" })
	restConfig, err := clientcmd.BuildConfigFromFlags("", theLab.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := scenarios.NewRunner(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	checked := false
	runner.OnStep = func(step string, rows []allocation.Row) {
		if step != "fill the cluster, one pod at a time" {
			return
		}
		checked = true
		var waiting, ns string
		holders := map[string]allocation.Row{} // device → the row of the pod holding it
		for _, r := range rows {
			ns = r.Namespace
			switch {
			case r.Phase == "Pending":
				waiting = r.Pod
			case r.Driver == gpu.DriverName:
				holders[r.DeviceRef()] = r
			}
		}
		if waiting == "" || len(holders) != 8 {
			t.Fatalf("the cascade left %q waiting with %d GPUs held; want one pod waiting and the lab's 8 DRA GPUs held:\n%s", waiting, len(holders), allocation.Table(rows))
		}

		why := kubectl("why", waiting, "-n", ns)
		for _, r := range holders {
			if !strings.Contains(why, "pod "+r.Pod+" (claim "+r.Claim+")") {
				t.Errorf("why %s does not name the holder %s of %s", waiting, r.Pod, r.DeviceRef())
			}
		}
		var e struct {
			Pods []struct {
				ReasonCode string                 `json:"reasonCode"`
				Candidates []allocation.Candidate `json:"candidates"`
			} `json:"pods"`
		}
		if err := json.Unmarshal([]byte(kubectl("why", "pod/"+waiting, "-n", ns, "-o", "json")), &e); err != nil || len(e.Pods) != 1 {
			t.Fatalf("why -o json: %v %+v", err, e)
		}
		if e.Pods[0].ReasonCode != allocation.AllAllocated {
			t.Errorf("why %s: reason %q, want %s", waiting, e.Pods[0].ReasonCode, allocation.AllAllocated)
		}
		seen := map[string]bool{}
		for _, c := range e.Pods[0].Candidates {
			h, ok := holders[c.Device]
			if !ok {
				continue // a counting node's GPU is no DRA device; another driver's
			}
			seen[c.Device] = true
			if c.State != allocation.StateAllocated || c.Subrequest != h.Subrequest || len(c.Holders) != 1 || !slices.Contains(c.Holders[0].Pods, ns+"/"+h.Pod) {
				t.Errorf("candidate %+v: want Allocated through subrequest %s, held by %s", c, h.Subrequest, h.Pod)
			}
		}
		if len(seen) != len(holders) {
			t.Errorf("why lists %d of the %d held GPUs as candidates", len(seen), len(holders))
		}

		devices := kubectl("devices", "-o", "wide")
		lines := strings.Split(devices, "\n")
		for dev, r := range holders {
			key := " " + gpu.DriverName + " " + r.Pool + " " + r.Device + " "
			line := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(" "+strings.Join(strings.Fields(l), " ")+" ", key) })
			if line < 0 {
				t.Errorf("devices has no row for %s:\n%s", dev, devices)
				continue
			}
			f := strings.Join(strings.Fields(lines[line]), " ")
			if !strings.Contains(f, " Allocated gpu/"+r.Subrequest+" pod "+ns+"/"+r.Pod+" (claim "+ns+"/"+r.Claim+")") {
				t.Errorf("devices row of %s: %q; want it Allocated to pod %s through gpu/%s", dev, lines[line], r.Pod, r.Subrequest)
			}
		}
	}
	res, err := runner.Run(ctx, all[i])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures() {
		t.Error(f)
	}
	if !checked {
		t.Fatal("the scenario has no step \"fill the cluster, one pod at a time\" any more: the plugin was not asked")
	}

	// Two GPUs of any tier, where two nodes have one free each: pods hold
	// one H100, one A100 and the four L4s, and a pod asking two GPUs
	// waits, explained per node.
	const ns = "kubectl-dra-per-node"
	apply := func(manifest string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "kubectl", "apply", "-f", "-")
		cmd.Env, cmd.Stdin = env, strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		cmd := exec.Command("kubectl", "delete", "namespace", ns, "--wait=false")
		cmd.Env = env
		_ = cmd.Run()
	})
	apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n")
	var holders []string
	for _, h := range []struct {
		class string
		count int
	}{{"h100", 1}, {"a100", 1}, {"l4", 4}} {
		holders = append(holders, claimAndPod(ns, "hold-"+h.class, h.class+"."+gpu.DriverName, h.count))
	}
	apply(strings.Join(holders, "---\n"))
	wait := exec.CommandContext(ctx, "kubectl", "wait", "-n", ns, "--for=jsonpath={.status.phase}=Running", "pod", "--all", "--timeout=120s")
	wait.Env = env
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("the pods holding GPUs: %v\n%s", err, out)
	}
	apply(claimAndPod(ns, "two", gpu.DriverName, 2))
	var why string
	for range 60 {
		if why = kubectl("why", "two", "-n", ns); strings.Contains(why, "NotOnOneNode") {
			break
		}
		time.Sleep(time.Second)
	}
	flat := strings.Join(strings.Fields(why), " ")
	for _, want := range []string{"NotOnOneNode", "at most 1 on any node (gpu-a100 1, gpu-h100 1)"} {
		if !strings.Contains(flat, want) {
			t.Errorf("why two (two GPUs, one free on each of two nodes) lacks %q:\n%s", want, why)
		}
	}
}

// claimAndPod is a claim of count devices of class and a pod using it,
// both named name.
func claimAndPod(ns, name, class string, count int) string {
	return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: %[3]s, count: %[4]d}
---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimName: %[1]s
`, name, ns, class, count)
}
