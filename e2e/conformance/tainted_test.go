package conformance

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// gpuTaint is the taint GKE puts on every node of a GPU node pool.
var gpuTaint = config.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}

// TestTaintedGPUNodes runs the installed dralab-conformance, cluster layer,
// on a conformance lab whose GPU nodes carry a cloud's NoSchedule taint:
// without a toleration no check fails, each check that needs a pod is not
// verified as the cluster's, naming the taint, and the run does not pass
// (exit 2); given --toleration, it passes. The GPU nodes publish their
// pools a GPU a slice: the suite reads pools of many slices.
func TestTaintedGPUNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab and installs dralab-conformance: run without -short")
	}
	ctx := context.Background()
	cfg, err := scratchlab.ConformanceConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "t-tainted"
	for i := range cfg.Nodes {
		if g := cfg.Nodes[i].GPUs; g != nil {
			cfg.Nodes[i].Taints = append(cfg.Nodes[i].Taints, gpuTaint)
			// And a pool of many slices: a GPU a slice (its partitions
			// with it where they fit, its counter sets apart), as a
			// driver with more devices than a slice holds publishes.
			if g.Mode != config.GPUModeDevicePlugin {
				g.DevicesPerSlice = 1
			}
		}
	}
	l, tool, consent, commandEnv := toolLab(ctx, t, cfg)
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	slices, err := kubernetes.NewForConfigOrDie(restConfig).ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=gpu.dralab.dev"})
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]int64{}
	for _, sl := range slices.Items {
		pools[sl.Spec.Pool.Name] = max(pools[sl.Spec.Pool.Name], sl.Spec.Pool.ResourceSliceCount)
	}
	if pools["nic-h100"] < 8 {
		t.Fatalf("the 8 GPUs of nic-h100 in %d slices; want a GPU a slice (pools and their slices: %v)", pools["nic-h100"], pools)
	}
	driverManifest, err := filepath.Abs(defaultManifest)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The podresources check reads a node's kubelet socket: the H100
	// node's, tainted as the others.
	const node = "gpu-h100"
	socket := labstate.Dir(st.StateDir).Node(node).PodResourcesSocket()
	run := func(extra ...string) (string, int) {
		cmd := exec.CommandContext(ctx, tool, append([]string{"--manifest", driverManifest, "--kubeconfig", l.Kubeconfig(), "--target", consent, "--cluster-only",
			"--node", node, "--podresources-socket", socket}, extra...)...)
		cmd.Env = append(os.Environ(), commandEnv...)
		out, err := cmd.CombinedOutput()
		code := 0
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("dralab-conformance: %v\n%s", err, out)
		}
		return string(out), code
	}

	out, code := run()
	t.Logf("without a toleration (exit %d):\n%s", code, out)
	if code != 2 || strings.Contains(out, "FAIL cluster/") {
		t.Errorf("without a toleration: exit %d, want 2 and no check failed", code)
	}
	keptOff := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "not verified, the cluster's") {
			keptOff++
			if !strings.Contains(line, "taint nvidia.com/gpu=present:NoSchedule not tolerated") {
				t.Errorf("a check the cluster kept off does not name the taint: %s", line)
			}
		}
	}
	if keptOff == 0 || !strings.Contains(out, "SKIP cluster/single device") {
		t.Errorf("%d checks named as the cluster's; want single device among them", keptOff)
	}

	out, code = run("--toleration", "nvidia.com/gpu=present:NoSchedule")
	t.Logf("with --toleration (exit %d):\n%s", code, out)
	if code != 0 || !strings.Contains(out, "PASS cluster/single device") || !strings.Contains(out, "0 failed") {
		t.Errorf("with --toleration: exit %d; want a pass", code)
	}
}

var (
	toolOnce sync.Once
	toolPath string
	toolErr  error
)

// installTool installs dralab-conformance with go install from the
// conformance module's folder, once for the package's tests, as a driver
// author does; the binary's path.
func installTool(t *testing.T) string {
	t.Helper()
	toolOnce.Do(func() {
		module, err := filepath.Abs("../../drivers/conformance")
		if err != nil {
			toolErr = err
			return
		}
		gobin, err := os.MkdirTemp("", "dralab-conformance-bin")
		if err != nil {
			toolErr = err
			return
		}
		cmd := exec.Command("go", "install", "./cmd/dralab-conformance")
		cmd.Dir, cmd.Env = module, append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOBIN="+gobin)
		if out, err := cmd.CombinedOutput(); err != nil {
			toolErr = errors.New("go install ./cmd/dralab-conformance: " + err.Error() + "\n" + string(out))
			return
		}
		toolPath = filepath.Join(gobin, "dralab-conformance")
	})
	if toolErr != nil {
		t.Fatal(toolErr)
	}
	return toolPath
}

// toolLab starts a lab of cfg, stopped when the test ends, and installs
// dralab-conformance to run on it as a driver author runs it: the lab, the
// tool's path, the --target the lab's kubeconfig consents to, and the
// environment of the manifest's commands there.
func toolLab(ctx context.Context, t *testing.T, cfg *config.Config) (*lab.Lab, string, string, []string) {
	t.Helper()
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	l, err := scratchlab.Start(ctx, cfg, cfg.Name)
	t.Cleanup(func() {
		if err := scratchlab.Stop(context.Background(), l); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	tool := installTool(t)
	consent := labConsent(t, l.Kubeconfig())
	commandEnv, err := scratchlab.CommandEnv(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	return l, tool, consent, commandEnv
}

// labConsent is the --target a lab's kubeconfig consents to: its current
// context and that context's server.
func labConsent(t *testing.T, file string) string {
	t.Helper()
	kubeconfig, err := clientcmd.LoadFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	current := kubeconfig.Contexts[kubeconfig.CurrentContext]
	if current == nil || kubeconfig.Clusters[current.Cluster] == nil {
		t.Fatalf("the lab's kubeconfig %s has no current context with a cluster", file)
	}
	return target.Consent(kubeconfig.CurrentContext, kubeconfig.Clusters[current.Cluster].Server)
}
