package e2e

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/drametrics"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
	"github.com/dralab/dralab/scenarios"
)

// kindCI is the kind lab of docs/kind.md's recipe and of TestKindLab: a
// control plane and three workers, one per GPU tier of the article's
// cascade.
const kindCI = "kind-ci.yaml"

// kindProofImage runs the proof containers on a kind lab here: no registry
// is reachable, and the lab's node image holds its pause image, busybox
// (sh and env, as the conformance suite's proofs need).
const kindProofImage = "registry.k8s.io/pause:3.10"

// kindUnmet are the scenarios the kind lab does not meet beside those of
// the example labs it is not: counting needs the default lab's
// device-plugin nodes.
var kindUnmet = []string{"counting"}

// TestKindLab runs docs/kind.md's recipe for a driver's CI, its own
// commands, on the container engine that answers (podman in this
// project's CI): lab:up of lab/examples/kind-ci.yaml on the kind backend,
// the conformance tool installed from its module and run with --cluster-only
// against the lab (green: every check the manifest enables passes), and
// lab:down. Between lab:up and the conformance run it checks the lab:
// its nodes run v1.37.2 on containerd, the chart's DaemonSet publishes
// every GPU, every scenario this topology meets holds (the article's
// cascade among them, and gpu-failure's gpu:fail and gpu:heal through the
// nodes' containers); after lab:down, that no container, volume or
// network of the lab's is left. No registry is reachable here, so the
// nodes run the node image of the lab's own Kubernetes, built first
// (kind:nodeImage), and the proof containers the lab's busybox pause
// image ($PROOF_IMAGE); on GitHub's runners the recipe pulls kindest/node
// and busybox. Where no container engine answers it says so and skips:
// the embedded lab runs the same scenarios there.
func TestKindLab(t *testing.T) {
	requireCluster(t)
	if theLab == nil {
		t.Skip("runs where the suite starts its own lab (no KUBECONFIG): it brings up a kind lab of its own, not for a run against a cluster the user chose")
	}
	ctx := context.Background()
	if _, err := build.Dralab(ctx); err != nil {
		t.Fatal(err)
	}
	job := readRecipe(t)
	root, err := os.MkdirTemp("", "dralab-e2e-kind-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	cfg, err := config.Example(kindCI)
	if err != nil {
		t.Fatal(err)
	}
	if job.Env["DRALAB_CONFIG"] != "lab/examples/"+kindCI {
		t.Fatalf("the recipe's lab is %q, want lab/examples/%s", job.Env["DRALAB_CONFIG"], kindCI)
	}
	engine := kindEngine(ctx, t, cfg, root)
	networkBefore := exec.Command(engine, "network", "inspect", "kind").Run() == nil

	bin := t.TempDir()
	artifacts := os.Getenv("ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	env := append(os.Environ(), "DRALAB_STATE_DIR="+root, "DRALAB_KIND_NODE_IMAGE=", "PROOF_IMAGE="+kindProofImage,
		"GOBIN="+bin, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "ARTIFACTS="+artifacts, "DRALAB_LAB=")
	for k, v := range job.Env {
		if k != "ARTIFACTS" {
			env = append(env, k+"="+v)
		}
	}
	var down []recipeStep
	defer func() {
		for _, step := range down {
			runStep(t, step, env)
		}
		// Nothing of the lab's is left on the engine.
		for _, args := range [][]string{
			{"ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster=" + cfg.Name},
			{"volume", "ls", "-q", "--filter", "label=io.x-k8s.kind.cluster=" + cfg.Name},
		} {
			out, err := exec.Command(engine, args...).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("after lab:down, %s %s: %q, %v; want nothing", engine, strings.Join(args, " "), out, err)
			}
		}
		if !networkBefore && exec.Command(engine, "network", "inspect", "kind").Run() == nil {
			t.Errorf("after lab:down, the network kind created for the lab is left")
		}
	}()
	for _, step := range job.Steps {
		switch {
		case step.Run == "":
			continue // GitHub's own actions: checkout, setup-go, upload-artifact
		case step.If == "always()":
			down = append(down, step)
			continue
		}
		if !runStep(t, step, env) {
			t.FailNow()
		}
		if strings.Contains(step.Run, "lab:up") {
			checkKindLab(ctx, t, cfg.Name, root)
		}
	}
	if !slices.ContainsFunc(job.Steps, func(s recipeStep) bool {
		return strings.Contains(s.Run, "dralab-conformance") && strings.Contains(s.Run, "--cluster-only")
	}) {
		t.Error("the recipe runs no dralab-conformance --cluster-only")
	}
}

// kindEngine is the container engine a kind lab of cfg runs on, with the
// node image of the lab's own Kubernetes built (or found built) in it: no
// registry is reachable here. Where no engine answers, the test is skipped
// saying why; a kind cluster of cfg's name already running fails it.
func kindEngine(ctx context.Context, t *testing.T, cfg *config.Config, root string) string {
	t.Helper()
	// An absent kind lab's status says why where no engine answers.
	probe, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := probe.Status(ctx); err != nil {
		t.Fatal(err)
	} else if st.Phase == status.PhaseAbsent && st.Message != "" {
		if fail, why := withoutEngine(os.Getenv("CI"), st.Message); fail {
			t.Fatal(why)
		} else {
			t.Skip(why)
		}
	}
	start := time.Now()
	img, err := lab.BuildKindNodeImage(ctx, lab.WithStateRoot(root), lab.WithProgress(logProgress(t)))
	if err != nil {
		t.Fatal(err)
	}
	if img.Engine == "" {
		t.Fatalf("the node image is loaded into no engine: %s", img.Why)
	}
	t.Logf("node image %s (reused %v) in %s, loaded into %s", img.Name, img.Reused, time.Since(start).Round(time.Second), img.Engine)
	if out, _ := exec.Command(img.Engine, "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+cfg.Name).Output(); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("a kind cluster %s runs on %s already, which is not this test's to reuse or delete: delete it first", cfg.Name, img.Engine)
	}
	return img.Engine
}

// withoutEngine says what becomes of a kind test where no container
// engine answers (why: which engines were tried, and their answers): on a
// developer's machine it is skipped, saying so; where CI is set it fails,
// since a CI whose engine is broken must not pass green.
func withoutEngine(ci, why string) (fail bool, message string) {
	if ci != "" {
		return true, "CI is set and no container engine answers, so the kind runs cannot be made: " + why
	}
	return false, "kind run skipped on this machine: " + why + ". The embedded lab runs the same scenarios here"
}

// TestKindNVMLLab brings up lab/examples/nvml-mock.yaml on kind: the GPU
// driver's image, built with cgo and carrying its C libraries, serves each
// node's go-nvml mock server (a release of the chart per server, nodes
// selected by their nvml label). Every GPU is published, and the driver
// passes the conformance suite's cluster layer for its NVML manifest
// (drivers/nvml/driver.yaml: MIG instances created through the mock at
// prepare, group claims, health through gpu:fail by exec in the node);
// after lab:down no container of the lab's is left.
func TestKindNVMLLab(t *testing.T) {
	requireCluster(t)
	if theLab == nil {
		t.Skip("runs where the suite starts its own lab (no KUBECONFIG): it brings up a kind lab of its own, not for a run against a cluster the user chose")
	}
	ctx := context.Background()
	cfg, err := config.Example("nvml-mock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Backend = "dl-kind-nvml", config.BackendKind
	root := t.TempDir()
	engine := kindEngine(ctx, t, cfg, root)
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithProgress(logProgress(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Down(ctx); err != nil {
			t.Errorf("lab:down: %v", err)
		}
		if out, err := exec.Command(engine, "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+cfg.Name).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("after lab:down, containers of the lab's: %q, %v", out, err)
		}
	}()
	start := time.Now()
	if _, err := l.Up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("NVML lab up on kind in %s", time.Since(start).Round(time.Second))
	_, client := labClients(t, l)
	checkKindNodes(ctx, t, client, l.Config())
	m, err := manifest.Load("../drivers/nvml/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	co, err := scratchlab.ClusterOptions(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	co.Image = kindProofImage
	start = time.Now()
	env.NewWithConfig(envconf.New().WithKubeconfigFile(l.Kubeconfig())).Test(t, cluster.Features(m, co)...)
	t.Logf("conformance, cluster layer, in %s", time.Since(start).Round(time.Second))
}

// checkKindLab checks the kind lab the recipe brought up and runs every
// scenario on it.
func checkKindLab(ctx context.Context, t *testing.T, name, root string) {
	l, err := lab.Open(name, lab.WithStateRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	restConfig, client := labClients(t, l)
	checkKindNodes(ctx, t, client, l.Config())
	all, from, err := scenarios.Selected()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scenarios: %s", from)
	policy := unmetPolicy{lab: "the kind lab", expected: slices.Concat(partitionedScenarios, fabricScenarios, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios, kindUnmet), agree: true}
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) { runScenario(ctx, t, restConfig, l, s, policy) })
	}
	t.Run("pod network", func(t *testing.T) { checkPodNetwork(ctx, t, client) })
	t.Run("scheduler metrics", func(t *testing.T) {
		// The scenarios' pods were scheduled: kind's scheduler counted
		// its DynamicResources plugin's evaluations.
		snap, err := drametrics.Read(ctx, l.Kubeconfig(), nil, nil)
		if err != nil || snap.SchedulerErr != nil {
			t.Fatalf("reading the scheduler's metrics: %v, %v", err, snap.SchedulerErr)
		}
		if snap.Scheduler.Evaluations["Filter"] == 0 || snap.Scheduler.Evaluations["PreFilter"] == 0 {
			t.Errorf("kind's scheduler evaluated DynamicResources %v times after the scenarios, want some", snap.Scheduler.Evaluations)
		}
		t.Logf("scheduler: %s", snap.Scheduler)
	})
}

// checkPodNetwork: on two workers, each with its own pod range, a pod
// fetches a page that a pod on the other serves, by the pod's address
// (with busybox's nc: the wget of Debian's static busybox crashes in its
// resolver, an address or not).
func checkPodNetwork(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: config.LabelLabNode})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) < 2 {
		t.Fatalf("%d workers, want two", len(nodes.Items))
	}
	server, client2 := nodes.Items[0], nodes.Items[1]
	if server.Spec.PodCIDR == "" || client2.Spec.PodCIDR == "" || server.Spec.PodCIDR == client2.Spec.PodCIDR {
		t.Fatalf("workers %s and %s have pod ranges %q and %q, want one of their own each", server.Name, client2.Name, server.Spec.PodCIDR, client2.Spec.PodCIDR)
	}
	ns := "podnet"
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	pod := func(name, node string, restart v1.RestartPolicy, script string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1.PodSpec{
			NodeName: node, RestartPolicy: restart, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}},
			Containers:  []v1.Container{{Name: "main", Image: kindProofImage, Command: []string{"/bin/busybox", "sh", "-c", script}}},
		}}
	}
	const page = "served across nodes"
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod("server", server.Name, v1.RestartPolicyAlways,
		"mkdir -p /www && echo '"+page+"' > /www/index.html && exec /bin/busybox httpd -f -p 8080 -h /www"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ip = p.Status.PodIP
		return p.Status.Phase == v1.PodRunning && ip != "", nil
	}); err != nil {
		t.Fatalf("the server pod on %s does not run: %v", server.Name, err)
	}
	if _, cidr, err := net.ParseCIDR(server.Spec.PodCIDR); err != nil || !cidr.Contains(net.ParseIP(ip)) {
		t.Errorf("the server pod's address %s is not in its node's range %s", ip, server.Spec.PodCIDR)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod("client", client2.Name, v1.RestartPolicyNever,
		"for i in 1 2 3 4 5 6 7 8 9 10; do printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 3 "+ip+" 8080 && exit 0; sleep 1; done; exit 1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase v1.PodPhase
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == v1.PodSucceeded || phase == v1.PodFailed, nil
	}); err != nil {
		t.Fatalf("the client pod on %s did not end: %v (phase %s)", client2.Name, err, phase)
	}
	logs, err := client.CoreV1().Pods(ns).GetLogs("client", &v1.PodLogOptions{}).DoRaw(ctx)
	if phase != v1.PodSucceeded || !strings.Contains(string(logs), page) {
		t.Fatalf("a pod on %s fetching http://%s:8080/ from a pod on %s: %s, %v\n%s", client2.Name, ip, server.Name, phase, err, logs)
	}
	t.Logf("a pod on %s (%s) fetched %q from a pod on %s at %s (%s)", client2.Name, client2.Spec.PodCIDR, page, server.Name, ip, server.Spec.PodCIDR)
}

// labClients are the clients of lab l's API server.
func labClients(t *testing.T, l *lab.Lab) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	return restConfig, client
}

// recipeStep is a step of a GitHub Actions job.
type recipeStep struct {
	Uses string `json:"uses"`
	Run  string `json:"run"`
	If   string `json:"if"`
}

// readRecipe reads the GitHub Actions job of docs/kind.md's recipe: the
// YAML block under its heading "A driver's CI on kind".
func readRecipe(t *testing.T) (job struct {
	Env   map[string]string `json:"env"`
	Steps []recipeStep      `json:"steps"`
}) {
	t.Helper()
	doc, err := os.ReadFile("../docs/kind.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## A driver's CI on kind\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/kind.md has no YAML block under \"## A driver's CI on kind\"")
	}
	var w struct {
		Jobs map[string]json.RawMessage `json:"jobs"`
	}
	if err := yaml.UnmarshalStrict([]byte(block), &w); err != nil {
		t.Fatalf("docs/kind.md's recipe: %v", err)
	}
	raw, ok := w.Jobs["dra-on-kind"]
	if !ok {
		t.Fatal("docs/kind.md's recipe has no job dra-on-kind")
	}
	if err := json.Unmarshal(raw, &job); err != nil {
		t.Fatalf("docs/kind.md's recipe: %v", err)
	}
	return job
}

// runStep runs a recipe step's commands with bash in the repository's
// root, as a GitHub runner does, logging their output.
func runStep(t *testing.T, step recipeStep, env []string) bool {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("bash", "-eo", "pipefail", "-c", step.Run)
	cmd.Dir, cmd.Env = "..", env
	out, err := cmd.CombinedOutput()
	t.Logf("recipe step (%s):\n%s\n%s", time.Since(start).Round(time.Second), strings.TrimSpace(step.Run), tail(string(out), 40))
	if err != nil {
		t.Errorf("recipe step %q: %v", strings.TrimSpace(step.Run), err)
		return false
	}
	return true
}

// tail is a text's last n lines.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkKindNodes checks that every lab node is a Ready kind worker of the
// lab's Kubernetes on containerd, whose GPUs the chart's DaemonSet
// publishes.
func checkKindNodes(ctx context.Context, t *testing.T, client kubernetes.Interface, cfg *config.Config) {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != len(cfg.Nodes)+1 {
		t.Errorf("%d nodes, want a control plane and %d workers", len(nodes.Items), len(cfg.Nodes))
	}
	published, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := client.CoreV1().Pods("dralab-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		info := n.Status.NodeInfo
		ready := slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady && c.Status == v1.ConditionTrue })
		if !ready || info.KubeletVersion != config.KubernetesVersion || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://") {
			t.Errorf("node %s: ready %v, kubelet %s, runtime %s; want Ready, %s, containerd", n.Name, ready, info.KubeletVersion, info.ContainerRuntimeVersion, config.KubernetesVersion)
		}
		labNode := n.Labels[config.LabelLabNode]
		i := slices.IndexFunc(cfg.Nodes, func(c config.Node) bool { return c.Name == labNode })
		if i < 0 {
			continue
		}
		want := cfg.Nodes[i].GPUs.Count
		if nv := cfg.Nodes[i].GPUs.NVML; nv != "" {
			want = nvmlMockGPUs[nv]
		}
		got := 0
		for _, s := range published.Items {
			if s.Spec.Driver == gpu.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == n.Name {
				got += countGPUs(s)
			}
		}
		driverPod := slices.ContainsFunc(pods.Items, func(p v1.Pod) bool {
			return p.Spec.NodeName == n.Name && p.Status.Phase == v1.PodRunning && len(p.OwnerReferences) == 1 && p.OwnerReferences[0].Kind == "DaemonSet"
		})
		if got != want || !driverPod {
			t.Errorf("lab node %s (kind node %s): %d GPUs published, want %d; the chart's DaemonSet runs a driver pod there: %v", labNode, n.Name, got, want, driverPod)
		}
	}
}

// nvmlMockGPUs are the whole GPUs of go-nvml's mock servers the NVML lab
// runs: a DGX H100's 8, a DGX A100's 8 (in MIG mode, each published with
// its MIG devices, which countGPUs leaves out), and the mixed server's
// 2 H100s, 2 A100s and 4 L4s.
var nvmlMockGPUs = map[string]int{"mock:dgxh100": 8, "mock:dgxa100-mig": 8, "mock:mixed": 8}

func countGPUs(s resourceapi.ResourceSlice) int {
	n := 0
	for _, d := range s.Spec.Devices {
		if t := d.Attributes[gpu.AttrType].StringValue; t != nil && *t == gpu.TypeGPU {
			n++
		}
	}
	return n
}

// logProgress reports a lab's steps in the test's log.
func logProgress(t *testing.T) func(string) func(error) {
	return func(step string) func(error) {
		start := time.Now()
		return func(err error) {
			if err != nil {
				t.Logf("✗ %s (%s): %v", step, time.Since(start).Round(100*time.Millisecond), err)
				return
			}
			t.Logf("✓ %s (%s)", step, time.Since(start).Round(100*time.Millisecond))
		}
	}
}

// Where no engine answers, a kind test is skipped on a developer's
// machine and fails in CI, naming the engines tried either way.
func TestKindWithoutEngineFailsInCI(t *testing.T) {
	const tried = "no container engine: docker: not installed; podman: exit status 125: crun: cgroups in hybrid mode not supported"
	if fail, msg := withoutEngine("true", tried); !fail || !strings.Contains(msg, "CI is set") || !strings.Contains(msg, tried) {
		t.Errorf("with CI set: fail %v, %q; want a failure naming the engines tried", fail, msg)
	}
	if fail, msg := withoutEngine("", tried); fail || !strings.Contains(msg, "skipped") || !strings.Contains(msg, tried) {
		t.Errorf("without CI: fail %v, %q; want a skip naming the engines tried", fail, msg)
	}
}
