package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/examples"
	"github.com/dralab/dralab/scenarios"
)

// The scenarios each example lab is written for, as their scenario.yaml
// says (lab:); the default lab's are the others. On another lab a
// scenario is unmet, or runs where the lab has what it needs.
var (
	// partitionedScenarios need split or shared GPUs, which the default
	// lab does not have: on it TestScenarios skips them as unmet, as it
	// does all those below.
	partitionedScenarios = scenariosFor("partitioned")
	// fabricScenarios need fabric-attached GPUs.
	fabricScenarios = scenariosFor("fabric")
	// workloadScenarios need the Workload API (PodGroups, gang
	// scheduling), which only lab/examples/workloads.yaml switches on.
	workloadScenarios = scenariosFor("workloads")
	// nicScenarios need the NIC driver beside the GPU driver, which only
	// lab/examples/gpu-nic.yaml runs.
	nicScenarios = scenariosFor("gpu-nic")
	// frontierScenarios need devices that account node resources, device
	// metadata or compatibility groups, which only
	// lab/examples/frontier.yaml (every 1.37 DRA gate on) publishes.
	frontierScenarios = scenariosFor("frontier")
	// cloudScenarios need GPU nodes tainted as cloud node pools taint
	// them, which only lab/examples/cloud.yaml has.
	cloudScenarios = scenariosFor("cloud")
	// racksScenarios need network-attached GPUs, enclosures that several
	// nodes reach, which only lab/examples/racks.yaml has.
	racksScenarios = scenariosFor("racks")
)

// testedLabs are the example labs a test runs their scenarios on, each
// scenario required to run there: the default lab (TestScenarios), the
// labs of a test of their own (runOnExampleLab), and the labs of
// TestScenarioMatrix, which runs every scenario not listed as unmet there
// (partitioned, fabric, racks: a test of their own would start the same lab for
// the same scenarios again).
var testedLabs = []string{"default", "workloads", "gpu-nic", "frontier", "cloud", "partitioned", "fabric", "racks"}

// TestEveryTestedLabIsStarted checks testedLabs against the tests: each
// is the default lab, one a test of its own starts, or one of the
// matrix's.
func TestEveryTestedLabIsStarted(t *testing.T) {
	started := []string{"default", "workloads", "gpu-nic", "frontier", "cloud"} // TestScenarios, and the tests of their own
	for _, m := range matrixLabs {
		started = append(started, strings.TrimSuffix(m.file, ".yaml"))
	}
	for _, lab := range testedLabs {
		if !slices.Contains(started, lab) {
			t.Errorf("lab/examples/%s.yaml is listed as tested, but no test starts it", lab)
		}
	}
}

// scenariosFor names the built-in scenarios written for an example lab.
func scenariosFor(lab string) []string {
	all, err := scenarios.All()
	if err != nil {
		panic(fmt.Sprintf("reading the built-in scenarios: %v", err))
	}
	var names []string
	for _, s := range all {
		if s.LabFile() == lab+".yaml" {
			names = append(names, s.Name)
		}
	}
	return names
}

// Every scenario is written for a lab that a test runs it on, and every
// such lab has scenarios: a scenario whose lab: names another example
// would never be run where it is meant to pass.
func TestEveryScenarioRunsOnItsLab(t *testing.T) {
	all, err := scenarios.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if !slices.Contains(testedLabs, strings.TrimSuffix(s.LabFile(), ".yaml")) {
			t.Errorf("scenario %s is written for lab/examples/%s, on which no test runs it; tested: %v", s.Name, s.LabFile(), testedLabs)
		}
	}
	for _, lab := range testedLabs {
		if len(scenariosFor(lab)) == 0 {
			t.Errorf("no scenario is written for lab/examples/%s.yaml", lab)
		}
	}
}

// TestGPUNICScenarios runs the scenarios of GPUs and NICs on a lab of
// lab/examples/gpu-nic.yaml: two drivers on every node, NIC i under the
// PCIe root of GPU i.
//
// After them the NIC drivers' own metrics say what no-prepare asserts
// from the claims: the driver of cpu-nic, whose ports skip node
// operations, was never asked to prepare a claim, the one of l4-nic was.
func TestGPUNICScenarios(t *testing.T) {
	l := runOnExampleLab(t, "gpu-nic.yaml", "dralab-e2e-gpu-nic", nicScenarios)
	st, err := l.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := labstate.Dir(st.StateDir)
	// no-prepare's quiet pods end "without an unprepare call": the
	// driver's own count says so, as it says that they got no prepare.
	quiet, prepared := claimCalls(t, dir, "cpu-nic", "prepare"), claimCalls(t, dir, "l4-nic", "prepare")
	quietUnprepared, unprepared := claimCalls(t, dir, "cpu-nic", "unprepare"), claimCalls(t, dir, "l4-nic", "unprepare")
	t.Logf("NIC driver calls: cpu-nic %d prepare, %d unprepare; l4-nic %d prepare, %d unprepare", quiet, quietUnprepared, prepared, unprepared)
	if quiet != 0 || quietUnprepared != 0 || prepared == 0 || unprepared == 0 {
		t.Errorf("cpu-nic's NIC driver: %d prepare and %d unprepare calls, want 0 and 0 (its ports skip node operations); l4-nic's: %d and %d, want some of each", quiet, quietUnprepared, prepared, unprepared)
	}
}

// claimCalls reads a node's NIC driver's metrics: the claims the kubelet
// asked it to prepare, or to unprepare (operation).
func claimCalls(t *testing.T, dir labstate.Dir, node, operation string) int {
	t.Helper()
	address, err := os.ReadFile(dir.Node(node).Driver(nodedrivers.RoleNICDriver).Metrics)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + strings.TrimSpace(string(address)) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^dralab_driver_claim_operations_total\{[^}]*operation="` + operation + `"[^}]*\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("node %s's NIC driver's metrics have no %s count:\n%s", node, operation, body)
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWorkloadScenarios runs the workload scenarios on a lab of
// lab/examples/workloads.yaml: 8-GPU servers in NVLink domains, the
// Workload API and its gates on.
func TestWorkloadScenarios(t *testing.T) {
	runOnExampleLab(t, "workloads.yaml", "dralab-e2e-workloads", workloadScenarios)
}

// TestCloudScenarios runs the scenarios of tainted GPU nodes on a lab of
// lab/examples/cloud.yaml: GPU nodes tainted as cloud node pools are.
func TestCloudScenarios(t *testing.T) {
	runOnExampleLab(t, "cloud.yaml", "dralab-e2e-cloud", cloudScenarios)
}

// TestFrontierScenarios runs the scenarios of Kubernetes 1.37's alpha DRA
// features on a lab of lab/examples/frontier.yaml: every DRA gate on, every
// API version served.
func TestFrontierScenarios(t *testing.T) {
	l := runOnExampleLab(t, "frontier.yaml", "dralab-e2e-frontier", frontierScenarios)
	t.Run("a ResourcePoolStatusRequest counts as the lab does", func(t *testing.T) {
		checkPoolStatus(t, l)
	})
	t.Run("an extended resource cannot be backed by a GPU with host-memory overhead in 1.37", func(t *testing.T) {
		checkExtendedResourceOverhead(t, l)
	})
}

// runOnExampleLab starts a lab of an example configuration, runs the named
// scenarios on it, one after another, and returns it; it is deleted when
// the test ends.
func runOnExampleLab(t *testing.T, file, labName string, names []string) *lab.Lab {
	if len(names) == 0 {
		t.Fatalf("no scenario is written for lab/examples/%s", file)
	}
	l, restConfig := startExampleLab(t, file, labName)
	ctx := context.Background()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s, err := scenarios.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			// The lab was chosen for these scenarios: each must run.
			runScenario(ctx, t, restConfig, l, s, unmetPolicy{lab: "lab/examples/" + file, agree: true})
		})
	}
	return l
}

// startExampleLab starts a lab of an example configuration, deleted when
// the test ends. It runs only where the suite starts embedded labs.
func startExampleLab(t *testing.T, file, labName string) (*lab.Lab, *rest.Config) {
	t.Helper()
	requireCluster(t)
	if theLab == nil {
		t.Skip("runs on an embedded lab of its own; against --kubeconfig, TestScenarios runs the scenarios the cluster has what they require for")
	}
	cfg, err := config.Example(file)
	if err != nil {
		t.Fatal(err)
	}
	l, err := scratchlab.Start(context.Background(), cfg, labName)
	t.Cleanup(func() {
		if err := scratchlab.Stop(context.Background(), l); err != nil {
			t.Errorf("deleting lab %s: %v", labName, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return l, restConfig
}

// matrixLabs are the example labs TestScenarioMatrix runs every scenario
// on, each with the scenarios it lacks what they require for, which are
// skipped; any other unmet scenario fails, and so does a listed one that
// runs. The default lab is TestScenarios' own; real-node.yaml needs a real
// node (root, containerd and runc: one per host), whose tests run in lab/.
var matrixLabs = []struct {
	file  string
	unmet []string
}{
	// One H100, no MIG, shared or fabric GPU.
	{"mixed.yaml", slices.Concat([]string{"counting", "device-taint", "fabric-attach", "gpu-failure", "gpu-sharing", "mig-fallback", "mig-partitions"}, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios)},
	// A MIG H100 and a shared L4 only: no two L4s share a PCIe root, so
	// multi-gpu's count of pairs resolves to 0 there (unmet, not a pass).
	{"partitioned.yaml", slices.Concat([]string{"admin-access", "claims", "counting", "device-taint", "extended-resource", "fabric-attach", "gpu-failure", "multi-gpu", "prioritized-fallback"}, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios)},
	// Two fabric-attached H100s only.
	{"fabric.yaml", slices.Concat([]string{"admin-access", "claims", "counting", "extended-resource", "gpu-sharing", "mig-fallback", "mig-partitions", "multi-gpu", "prioritized-fallback", "shared-claim"}, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios)},
	// Every kind of DRA GPU, none counted.
	{"soak.yaml", slices.Concat([]string{"counting", "fabric-attach"}, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios)},
	// Two L4s in nodes (no H100 or A100 in a node, none counted, shared
	// or partitioned; one a node, so no pair for multi-gpu), and
	// enclosures of network-attached GPUs.
	{"racks.yaml", slices.Concat([]string{"admin-access", "claim-status", "claims", "counting", "device-taint", "extended-resource", "fabric-attach", "gpu-failure", "gpu-sharing", "mig-fallback", "mig-partitions", "multi-gpu", "prioritized-fallback"}, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios)},
	// NVML's mock servers: MIG on an A100, no H100 MIG, nothing counted;
	// the PodGroup API on (for the conformance run's group claims), so
	// the workload scenarios that fit its 10 H100s run: a group's claim
	// and a gang sharing a claim.
	{"nvml-mock.yaml", []string{"counting", "fabric-attach", "gpu-sharing", "mig-fallback", "mig-partitions", "gang-vs-partial", "topology", "gang-fallback", "gang-partitions", "gpu-nic-pair", "bandwidth-shares", "no-prepare", "derived-alignment", "list-numa", "host-memory", "device-metadata", "cpu-mapping", "compatibility-groups", "tainted-gpu-nodes", "network-attach", "network-attached"}},
}

// failedH100Unmet are the scenarios the default lab cannot run with one
// H100 failed: those that need two free H100s, and those the default lab
// never runs.
var failedH100Unmet = slices.Concat([]string{"admin-access", "device-taint", "gpu-failure", "fabric-attach", "gpu-sharing", "mig-fallback", "mig-partitions"}, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios)

// TestScenarioMatrix runs every built-in scenario on every example lab, one
// lab at a time, and on the default lab with a failed H100: each scenario
// passes, or is one of the lab's listed unmet scenarios, skipped saying
// what the lab lacks; none fails, and no new skip appears. A scenario that hard-codes what one lab has fails here
// on another.
func TestScenarioMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six embedded labs: run without -short")
	}
	all, err := scenarios.All()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runAll := func(t *testing.T, l *lab.Lab, restConfig *rest.Config, policy unmetPolicy) {
		for _, s := range all {
			t.Run(s.Name, func(t *testing.T) {
				runScenario(ctx, t, restConfig, l, s, policy)
			})
		}
	}
	for _, m := range matrixLabs {
		name := strings.TrimSuffix(m.file, ".yaml")
		t.Run(name, func(t *testing.T) {
			l, restConfig := startExampleLab(t, m.file, "dl-matrix-"+name)
			if m.file == "soak.yaml" {
				manySlicePools(ctx, t, restConfig)
			}
			runAll(t, l, restConfig, unmetPolicy{lab: "lab/examples/" + m.file, expected: m.unmet, agree: true})
			if m.file == "soak.yaml" {
				// gpu-failure failed and healed an H100, which
				// republished its slice: the pool is whole again.
				manySlicePools(ctx, t, restConfig)
			}
		})
	}
	// The walkthrough fails an H100 by hand (gpu:fail) and goes on: every
	// scenario then counts one H100 fewer, or says why it cannot run.
	t.Run("default-h100-failed", func(t *testing.T) {
		l, restConfig := startExampleLab(t, examples.DefaultFile, "dl-matrix-failed")
		if _, err := l.FailGPU(ctx, lab.GPURef{Node: "gpu-h100", Device: "gpu-0"}, 79); err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(restConfig)
		if err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			s, err := allocation.Read(ctx, client, metav1.NamespaceDefault, nodedrivers.Vocabulary)
			return err == nil && len(s.DeviceTaints(gpu.DriverName, "gpu-h100", "gpu-0")) > 0, nil
		})
		if err != nil {
			t.Fatalf("waiting for gpu-h100/gpu-0 to be tainted in its ResourceSlice: %v", err)
		}
		runAll(t, l, restConfig, unmetPolicy{lab: "the default lab with gpu-h100/gpu-0 failed (XID 79)", expected: failedH100Unmet, agree: true})
	})
}

// manySlicePools checks the soak lab's pools of several slices (its H100
// and A100 nodes publish a GPU a slice): each of two slices, both naming
// the pool's two slices and of one generation. (A device change that
// rewrites one slice keeps the generation: the slice controller bumps it
// only where more than one write is needed.)
func manySlicePools(ctx context.Context, t *testing.T, restConfig *rest.Config) {
	t.Helper()
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"gpu-h100", "gpu-a100"} {
		var of []resourceapi.ResourcePool
		for _, sl := range list.Items {
			if sl.Spec.Driver == gpu.DriverName && sl.Spec.Pool.Name == pool {
				of = append(of, sl.Spec.Pool)
			}
		}
		if len(of) != 2 || of[0] != of[1] || of[0].ResourceSliceCount != 2 {
			t.Errorf("pool %s: %+v; want two slices, each naming the pool's two, of one generation", pool, of)
		}
	}
}
