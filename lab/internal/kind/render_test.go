package kind

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/charts"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

func TestRenderDefaultLab(t *testing.T) {
	cfg := config.Default()
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != cfg.Name || c.Nodes[0].Role != v1alpha4.ControlPlaneRole || len(c.Nodes) != len(cfg.Nodes)+1 {
		t.Fatalf("cluster %s with %d nodes, want %s with a control plane and %d workers", c.Name, len(c.Nodes), cfg.Name, len(cfg.Nodes))
	}
	for i, n := range cfg.Nodes {
		w := c.Nodes[i+1]
		if w.Role != v1alpha4.WorkerRole || w.Image != NodeImage {
			t.Errorf("node %d: role %s image %s", i+1, w.Role, w.Image)
		}
		want := map[string]string{LabelLabNode: n.Name, gpu.NodeProfileLabel: n.GPUs.Profile, gpu.NodeModeLabel: n.GPUs.Mode}
		for k, v := range want {
			if w.Labels[k] != v {
				t.Errorf("worker for %s: label %s = %q, want %q", n.Name, k, w.Labels[k], v)
			}
		}
	}
	for _, g := range []string{"DRADeviceTaints", "DRADeviceTaintRules"} {
		if !c.FeatureGates[g] {
			t.Errorf("feature gate %s is not on", g)
		}
	}
	// Gates locked on are left to their default: Kubernetes 1.38 removes
	// DynamicResourceAllocation, and a node given it would not start.
	for _, g := range []string{"DynamicResourceAllocation", "DRAPrioritizedList", "DRAAdminAccess", "DRAExtendedResource"} {
		if _, named := c.FeatureGates[g]; named {
			t.Errorf("feature gate %s, locked in %s, is named", g, config.KubernetesVersion)
		}
	}
	if c.RuntimeConfig["resource.k8s.io/v1"] != "true" {
		t.Errorf("runtime config = %v", c.RuntimeConfig)
	}
	// The scheduler serves /metrics where the API server's proxy reaches
	// it: on the node's address, to a request without credentials.
	if len(c.KubeadmConfigPatchesJSON6902) != 1 {
		t.Errorf("kubeadm JSON patches %+v, want the scheduler's", c.KubeadmConfigPatchesJSON6902)
	} else if p := c.KubeadmConfigPatchesJSON6902[0]; p.Kind != "ClusterConfiguration" || p.Version != "v1beta4" ||
		!strings.Contains(p.Patch, "{name: bind-address, value: 0.0.0.0}") || !strings.Contains(p.Patch, `"/healthz,/readyz,/livez,/metrics"`) {
		t.Errorf("the scheduler's kubeadm patch: %+v", p)
	}
	other := config.Default()
	other.NodeImage = "kindest/node:v1.30.0"
	if c, err := RenderFor(other, Host{}); err != nil || len(c.KubeadmConfigPatchesJSON6902) != 0 {
		t.Errorf("a node image of another Kubernetes (kubeadm's extraArgs a map before v1beta4): JSON patches %+v, %v; want none", c.KubeadmConfigPatchesJSON6902, err)
	}
	if len(c.ContainerdConfigPatches) != 1 || !strings.Contains(c.ContainerdConfigPatches[0], `[plugins."io.containerd.grpc.v1.cri"]`) ||
		!strings.Contains(c.ContainerdConfigPatches[0], `cdi_spec_dirs = ["/var/run/cdi"]`) {
		t.Errorf("containerd patches = %q", c.ContainerdConfigPatches)
	}
	if c.Networking.APIServerAddress != "127.0.0.1" {
		t.Errorf("API server address %q, want loopback", c.Networking.APIServerAddress)
	}
	var names []string
	for _, r := range nodedrivers.Releases(cfg) {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "dralab-driver-device-plugin,dralab-driver-dra" {
		t.Errorf("releases = %v, want one per GPU mode", names)
	}
	dp := chartValues(t, cfg, "dralab-driver-device-plugin")
	if dp["deviceClasses"].(map[string]any)["create"] != false || dp["nodeSelector"].(map[string]any)[gpu.NodeModeLabel] != "device-plugin" ||
		dp["image"].(map[string]any)["pullPolicy"] != "Never" {
		t.Errorf("device-plugin chart values = %v", dp)
	}
}

// chartValues are the chart's values for the lab's release of that name,
// with a test image.
func chartValues(t *testing.T, cfg *config.Config, name string) map[string]any {
	t.Helper()
	for _, r := range nodedrivers.Releases(cfg) {
		if r.Name == name {
			return ChartValues(r, "dralab-driver", "test")
		}
	}
	t.Fatalf("lab %s has no release %s", cfg.Name, name)
	return nil
}

// The driver the kind backend installs watches the faults file that
// UpdateGPUFaults writes on the node, in a directory the pod mounts.
func TestChartWatchesTheFaultsFile(t *testing.T) {
	c, err := charts.Load(charts.DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(c, chartValues(t, config.Default(), "dralab-driver-dra"), DriverNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ds := out["dralab-driver/templates/daemonset.yaml"]
	if !strings.Contains(ds, "name: DRALAB_FAULTS_FILE\n          value: \""+FaultsFile+"\"") {
		t.Errorf("the DaemonSet does not watch %s:\n%s", FaultsFile, ds)
	}
	if !strings.Contains(ds, "mountPath: \""+path.Dir(FaultsFile)+"\"") {
		t.Errorf("the DaemonSet does not mount %s", path.Dir(FaultsFile))
	}
	counting, err := charts.Render(c, chartValues(t, config.Default(), "dralab-driver-device-plugin"), DriverNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(counting["dralab-driver/templates/daemonset.yaml"], "DRALAB_FAULTS_FILE") {
		t.Error("the counting mode's driver watches a faults file")
	}
}

// A node's topology reaches its kind worker as labels, and the driver the
// chart runs reads its GPUs' topology attributes from those labels.
func TestTopologyReachesKind(t *testing.T) {
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Backend: config.BackendKind, Nodes: []config.Node{
		{Name: "a", Topology: &config.Topology{Rack: "r1", NVLinkDomain: "nvl-1"}, GPUs: &config.GPUs{Profile: "h100-80gb", Count: 8}},
	}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Nodes[1]; w.Labels[gpu.NodeRackLabel] != "r1" || w.Labels[gpu.NodeNVLinkDomainLabel] != "nvl-1" {
		t.Errorf("worker labels %v", w.Labels)
	}
	chart, err := charts.Load(charts.DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(chart, chartValues(t, cfg, "dralab-driver-dra"), DriverNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ds := out["dralab-driver/templates/daemonset.yaml"]
	for _, want := range []string{
		"name: DRALAB_RACK_LABEL\n          value: \"" + gpu.NodeRackLabel + "\"",
		"name: DRALAB_NVLINK_DOMAIN_LABEL\n          value: \"" + gpu.NodeNVLinkDomainLabel + "\"",
	} {
		if !strings.Contains(ds, want) {
			t.Errorf("the DaemonSet lacks %q:\n%s", want, ds)
		}
	}
}

// A tainted node's kind worker joins with its taints: kubeadm's
// JoinConfiguration registers them, as the embedded lab's kubelets do.
func TestTaintsReachKind(t *testing.T) {
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Backend: config.BackendKind, Nodes: []config.Node{
		{Name: "a", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1}, Taints: []config.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}},
		{Name: "b", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1}},
	}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	tainted, plain := c.Nodes[1], c.Nodes[2]
	if len(tainted.KubeadmConfigPatches) != 1 || len(plain.KubeadmConfigPatches) != 0 {
		t.Fatalf("patches of the tainted worker %q, of the other %q", tainted.KubeadmConfigPatches, plain.KubeadmConfigPatches)
	}
	var patch struct {
		Kind             string `json:"kind"`
		NodeRegistration struct {
			Taints []v1.Taint `json:"taints"`
		} `json:"nodeRegistration"`
	}
	if err := yaml.UnmarshalStrict([]byte(tainted.KubeadmConfigPatches[0]), &patch); err != nil {
		t.Fatal(err)
	}
	if want := (v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule}); patch.Kind != "JoinConfiguration" || len(patch.NodeRegistration.Taints) != 1 || patch.NodeRegistration.Taints[0] != want {
		t.Errorf("the patch %+v; want a JoinConfiguration registering %v", patch, want)
	}
}

// A kind worker with NICs carries their profile and count as labels, and
// the label that selects it for the NIC driver's release, whose values
// render through the chart: `dralab-driver nic` on those nodes alone,
// reading the labels.
func TestNICsReachKind(t *testing.T) {
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Backend: config.BackendKind, Nodes: []config.Node{
		{Name: "a", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 8}, NICs: &config.NICs{Profile: "cx7-400g", Count: 8}},
		{Name: "b", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 2}},
	}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	nic, ok := nodedrivers.ReleaseOf(cfg, cfg.Nodes[0], nodedrivers.RoleNICDriver)
	if !ok || nic.Name != "dralab-driver-nic" || !nic.Serves(cfg.Nodes[0]) || nic.Serves(cfg.Nodes[1]) {
		t.Errorf("the NIC driver's release %+v (%v): want dralab-driver-nic, serving node a alone", nic, ok)
	}
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Nodes[1]; w.Labels[nodedrivers.LabelNICProfile] != "cx7-400g" || w.Labels[nodedrivers.LabelNICs] != "8" || w.Labels[nodedrivers.LabelNICDriver] != "true" {
		t.Errorf("worker a's labels %v, want its NICs", w.Labels)
	}
	if w := c.Nodes[2]; w.Labels[nodedrivers.LabelNICDriver] != "" || w.Labels[nodedrivers.LabelNICProfile] != "" {
		t.Errorf("worker b, without NICs, is labelled %v", w.Labels)
	}
	chart, err := charts.Load(charts.DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(chart, chartValues(t, cfg, "dralab-driver-nic"), DriverNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ds := out["dralab-driver/templates/daemonset.yaml"]
	for _, want := range []string{
		`args: ["nic"]`,
		"nodeSelector:\n        " + nodedrivers.LabelNICDriver + ": \"true\"",
		"name: DRALAB_PROFILE_LABEL\n          value: \"" + nodedrivers.LabelNICProfile + "\"",
		"name: DRALAB_NICS_LABEL\n          value: \"" + nodedrivers.LabelNICs + "\"",
	} {
		if !strings.Contains(ds, want) {
			t.Errorf("the NIC release's DaemonSet lacks %q:\n%s", want, ds)
		}
	}
	// lab:status and a failed wait name the DaemonSets that serve a node.
	profile, driver := describe(cfg, cfg.Nodes[0])
	if profile != "8× h100-80gb (dra), 8× cx7-400g NICs" ||
		driver != "DaemonSet dralab-system/dralab-driver-dra-dralab-driver; DaemonSet dralab-system/dralab-driver-nic-dralab-driver" {
		t.Errorf("node a: %q, %q", profile, driver)
	}
	if got := logOf(cfg, "a", nodedrivers.RoleNICDriver); got != "kubectl -n dralab-system logs daemonset/dralab-driver-nic-dralab-driver" {
		t.Errorf("the NIC driver's log on node a: %q", got)
	}
	if got := logOf(cfg, "b", nodedrivers.RoleNICDriver); !strings.Contains(got, "kubelet") {
		t.Errorf("node b runs no NIC driver; its log named %q", got)
	}
	if rs := nodedrivers.Releases(&config.Config{Nodes: []config.Node{{Name: "b"}}}); len(rs) != 0 {
		t.Errorf("a lab without devices has releases %v", rs)
	}
}

// On a host like these VMs (cgroup v1, no CAP_SYS_RESOURCE) the nodes'
// kubelets are told to run on cgroup v1 and their containerd not to give
// containers a negative OOM score; a host that lacks nothing gets neither.
func TestRenderAdaptsToTheHost(t *testing.T) {
	cfg := config.Default()
	plain, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.KubeadmConfigPatches) != 0 || len(plain.ContainerdConfigPatches) != 1 {
		t.Errorf("a host that lacks nothing: kubeadm patches %q, containerd patches %q", plain.KubeadmConfigPatches, plain.ContainerdConfigPatches)
	}
	c, err := RenderFor(cfg, Host{CgroupV1: true, NoSysResource: true})
	if err != nil {
		t.Fatal(err)
	}
	// kubeadm's preflight refuses cgroup v1 unless SystemVerification is
	// ignored, on the control plane (init) and the workers (join) alike.
	want := []string{"kind: KubeletConfiguration\nfailCgroupV1: false\n",
		"kind: InitConfiguration\nnodeRegistration:\n  ignorePreflightErrors:\n  - SystemVerification\n",
		"kind: JoinConfiguration\nnodeRegistration:\n  ignorePreflightErrors:\n  - SystemVerification\n"}
	if !slices.Equal(c.KubeadmConfigPatches, want) {
		t.Errorf("on cgroup v1: kubeadm patches %q, want %q", c.KubeadmConfigPatches, want)
	}
	if !slices.ContainsFunc(c.ContainerdConfigPatches, func(p string) bool { return strings.Contains(p, "restrict_oom_score_adj = true") }) {
		t.Errorf("without CAP_SYS_RESOURCE: containerd patches %q", c.ContainerdConfigPatches)
	}
}

// The effective capabilities of /proc/<pid>/status say whether a process
// holds CAP_SYS_RESOURCE: a root shell's full set does, Docker's default
// set does not.
func TestHasCapability(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tsh\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n": true,
		"Name:\tsh\nCapEff:\t00000000a80425fb\nCapBnd:\t000001ffffffffff\n": false,
		"Name:\tsh\n": false,
	} {
		if got := hasCapability([]byte(status), capSysResource); got != want {
			t.Errorf("hasCapability(%q) = %v, want %v", status, got, want)
		}
	}
}

// Every node runs the lab's node image: kind's published v1.37 image,
// pinned by digest, unless the configuration names another.
func TestNodeImageIsTheLabs(t *testing.T) {
	cfg := config.Default()
	cfg.Backend = config.BackendKind
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.NodeImage, "kindest/node:v1.37.") || !strings.Contains(cfg.NodeImage, "@sha256:") {
		t.Errorf("a kind lab's default node image %q, want kind's of 1.37, pinned by digest", cfg.NodeImage)
	}
	cfg.NodeImage = "dralab.dev/kind-node:" + config.KubernetesVersion
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n.Image != cfg.NodeImage {
			t.Errorf("%s node runs %s, want %s", n.Role, n.Image, cfg.NodeImage)
		}
	}
	// The lab's own image has its own pod network and no CoreDNS image:
	// kind installs no kindnet and kubeadm no CoreDNS, nor pulls images
	// (the node imports them). On cgroup v1 the ignored checks are one
	// list. kind's image has kindnet and CoreDNS.
	if !c.Networking.DisableDefaultCNI || !slices.Equal(c.KubeadmConfigPatches, []string{
		"kind: InitConfiguration\nnodeRegistration:\n  ignorePreflightErrors:\n  - ImagePull\nskipPhases:\n- addon/coredns\n",
		"kind: JoinConfiguration\nnodeRegistration:\n  ignorePreflightErrors:\n  - ImagePull\n"}) {
		t.Errorf("the lab's own image: disableDefaultCNI %v, patches %q", c.Networking.DisableDefaultCNI, c.KubeadmConfigPatches)
	}
	if c, err = RenderFor(cfg, Host{CgroupV1: true}); err != nil || !strings.Contains(strings.Join(c.KubeadmConfigPatches, ""), "  - SystemVerification\n  - ImagePull\n") {
		t.Errorf("the lab's own image on cgroup v1: patches %q, %v", c.KubeadmConfigPatches, err)
	}
	cfg.NodeImage = ""
	if c, err = RenderFor(cfg, Host{}); err != nil || c.Networking.DisableDefaultCNI || len(c.KubeadmConfigPatches) != 0 {
		t.Errorf("kind's image: disableDefaultCNI %v, patches %q, %v", c.Networking.DisableDefaultCNI, c.KubeadmConfigPatches, err)
	}
}

// The node image is pulled as kind pulls it: from Docker Hub where the
// reference names no host, by its digest alone where one pins it.
func TestPullable(t *testing.T) {
	for in, want := range map[string]string{
		config.KindNodeImage:                  "docker.io/kindest/node@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5",
		"kindest/node:v1.37.0":                "docker.io/kindest/node:v1.37.0",
		"dralab.dev/kind-node:v1.37.2-abc":    "dralab.dev/kind-node:v1.37.2-abc",
		"localhost/kind-node:v1":              "localhost/kind-node:v1",
		"registry:5000/kind/node:v1@sha256:0": "registry:5000/kind/node@sha256:0",
	} {
		if got := pullable(in); got != want {
			t.Errorf("pullable(%q) = %q, want %q", in, got, want)
		}
	}
}

// Where the node image is neither in the engine nor pullable, the error
// is one line that names the target building the lab's own; where the
// engine holds one of the lab's own and the image is the default, that one
// runs, saying so; an image the user chose is never swapped.
func TestUnpullableNodeImage(t *testing.T) {
	noRegistry := `[ "$1" = pull ] && echo "Trying to pull $2..." && echo "Error: initializing source docker://$2: pinging container registry: dial tcp: lookup registry-1.docker.io: no such host" >&2; exit 125`
	engineCommands(t, map[string]string{"podman": noRegistry})
	_, _, err := ensureNodeImage(context.Background(), "podman", config.KindNodeImage, true)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "go run mage.go kind:nodeImage") || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("an unpullable node image: %v", err)
	}
	own := "dralab.dev/kind-node:" + config.KubernetesVersion + "-0123456789ab"
	engineCommands(t, map[string]string{"podman": `[ "$1" = images ] && echo ` + own + ` && echo dralab.dev/kind-node:v1.36.0-0123456789ab && exit 0; ` + noRegistry})
	use, note, err := ensureNodeImage(context.Background(), "podman", config.KindNodeImage, true)
	if err != nil || use != own || !strings.Contains(note, "running the lab's own, "+own) {
		t.Errorf("with the lab's own image loaded: %q, %q, %v; want it run, saying so", use, note, err)
	}
	if _, _, err := ensureNodeImage(context.Background(), "podman", "example.com/my/node:v1.37.2", false); err == nil {
		t.Error("an image the user chose, unpullable, was swapped for the lab's own")
	}
}

// NVML nodes of go-nvml's mock servers run on kind: each server's nodes
// get a release of the NVML inventory with that server (nodes selected by
// their nvml label, the fake profiles' by "fake"), the DeviceClasses
// created once; the host's NVML is not rendered yet and is refused, saying
// what to give instead.
func TestNVMLMocksReachKind(t *testing.T) {
	cfg := exampleLab(t, "nvml-mock.yaml")
	cfg.Nodes = append(cfg.Nodes, config.Node{Name: "l4", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 2, Mode: config.GPUModeDRA}})
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes[1:] {
		want := "fake"
		if n.Labels[LabelLabNode] != "l4" {
			want = "mock-" + map[string]string{"dgx-h100": "dgxh100", "dgx-a100": "dgxa100-mig", "mixed": "mixed"}[n.Labels[LabelLabNode]]
		}
		if got := n.Labels[nodedrivers.NVMLLabel]; got != want {
			t.Errorf("node %s: %s=%q, want %q", n.Labels[LabelLabNode], nodedrivers.NVMLLabel, got, want)
		}
	}
	var names []string
	classes := 0
	for _, r := range nodedrivers.Releases(cfg) {
		names = append(names, r.Name)
		if dc, ok := r.Values["deviceClasses"].(map[string]any); !ok || dc["create"] != false {
			classes++
		}
		sel := r.Values["nodeSelector"].(map[string]any)[nodedrivers.NVMLLabel]
		nv, _ := r.Values["nvml"].(map[string]any)
		if source, ok := nv["source"].(string); ok {
			if r.Values["inventory"] != "nvml" || "mock-"+strings.TrimPrefix(source, "mock:") != sel {
				t.Errorf("release %s: inventory %v, source %q, selects %v", r.Name, r.Values["inventory"], source, sel)
			}
		} else if sel != "fake" {
			t.Errorf("release %s of fake GPUs selects %v", r.Name, sel)
		}
	}
	if strings.Join(names, ",") != "dralab-driver-dra,dralab-driver-nvml-mock-dgxa100-mig-dra,dralab-driver-nvml-mock-dgxh100-dra,dralab-driver-nvml-mock-mixed-dra" || classes != 1 {
		t.Errorf("releases %v, %d of them creating the DeviceClasses; want one per source, one creating them", names, classes)
	}
	chart, err := charts.Load(charts.DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(chart, chartValues(t, cfg, "dralab-driver-nvml-mock-dgxh100-dra"), DriverNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ds := out["dralab-driver/templates/daemonset.yaml"]
	for _, want := range []string{"name: DRALAB_INVENTORY\n          value: \"nvml\"", "name: DRALAB_NVML\n          value: \"mock:dgxh100\"", nodedrivers.NVMLLabel + ": mock-dgxh100"} {
		if !strings.Contains(ds, want) {
			t.Errorf("the DaemonSet lacks %q:\n%s", want, ds)
		}
	}
	cfg.Nodes[0].GPUs.NVML = config.NVMLHost
	if _, err := RenderFor(cfg, Host{}); err == nil || !strings.Contains(err.Error(), "mock:<server>") {
		t.Errorf("the host's NVML on kind: %v", err)
	}
}

// exampleLab reads an example lab of lab/examples for the kind backend.
func exampleLab(t *testing.T, file string) *config.Config {
	t.Helper()
	cfg, err := config.Example(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend = config.BackendKind
	return cfg
}

// A node of the host's GPUs on kind is given the host's NVIDIA driver: its
// device files at their paths and its NVML library's directory read-only
// under the driver root its release names, whose driver pod is privileged
// (the device cgroup admits the device files) and reads the library there.
// One node at most has them, and a host without an NVIDIA driver is told
// why, in one error naming the field.
func TestHostGPUsOnKind(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"dev/nvidiactl", "dev/nvidia0", "dev/nvidia1", "dev/nvidia-uvm", "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "dev/null"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nv, err := DetectNVIDIA(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("gpu-host.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nname: gpu-host\nbackend: kind\n"+
		"nodes: [{name: l4, gpus: {profile: l4-24gb, count: 1}}, {name: real, gpus: {nvml: host}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := RenderFor(cfg, Host{NVIDIA: nv})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range c.Nodes[1:] {
		if n.Labels[LabelLabNode] == "l4" {
			if len(n.ExtraMounts) != 0 {
				t.Errorf("the fake GPUs' node mounts %v", n.ExtraMounts)
			}
			continue
		}
		if n.Labels[nodedrivers.NVMLLabel] != "host" {
			t.Errorf("the host GPUs' node: %s=%q, want host", nodedrivers.NVMLLabel, n.Labels[nodedrivers.NVMLLabel])
		}
		for _, m := range n.ExtraMounts {
			got = append(got, fmt.Sprintf("%s:%s:%v", strings.TrimPrefix(m.HostPath, root), m.ContainerPath, m.Readonly))
		}
	}
	want := []string{"/dev/nvidia-uvm:/dev/nvidia-uvm:false", "/dev/nvidia0:/dev/nvidia0:false", "/dev/nvidia1:/dev/nvidia1:false", "/dev/nvidiactl:/dev/nvidiactl:false",
		"/usr/lib/x86_64-linux-gnu:" + nodedrivers.HostDriverRoot + "/usr/lib/x86_64-linux-gnu:true"}
	if !slices.Equal(got, want) {
		t.Errorf("the host GPUs' node mounts\n%v, want\n%v", got, want)
	}

	chart, err := charts.Load(charts.DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(chart, chartValues(t, cfg, "dralab-driver-nvml-host-dra"), DriverNamespace)
	if err != nil {
		t.Fatal(err)
	}
	ds := out["dralab-driver/templates/daemonset.yaml"]
	for _, want := range []string{"name: DRALAB_INVENTORY\n          value: \"nvml\"", "name: DRALAB_DRIVER_ROOT\n          value: \"" + nodedrivers.HostDriverRoot + "\"",
		"privileged: true", nodedrivers.NVMLLabel + ": host", "hostPath: {path: \"" + nodedrivers.HostDriverRoot + "\""} {
		if !strings.Contains(ds, want) {
			t.Errorf("the host GPUs' DaemonSet lacks %q:\n%s", want, ds)
		}
	}
	if strings.Contains(ds, "DRALAB_NVML") {
		t.Errorf("the host GPUs' driver is given a mock server:\n%s", ds)
	}

	_, why := DetectNVIDIA(t.TempDir())
	if _, err := RenderFor(cfg, Host{noNVIDIA: why}); err == nil || !strings.Contains(err.Error(), "nodes[1].gpus.nvml") || !strings.Contains(err.Error(), "no NVIDIA driver") {
		t.Errorf("the host's GPUs on a host without NVIDIA's driver: %v", err)
	}
	cfg.Nodes = append(cfg.Nodes, config.Node{Name: "real2", GPUs: &config.GPUs{NVML: config.NVMLHost}})
	if _, err := RenderFor(cfg, Host{NVIDIA: nv}); err == nil || !strings.Contains(err.Error(), "nodes[2].gpus.nvml") || !strings.Contains(err.Error(), "nodes[1]") {
		t.Errorf("two nodes of the host's GPUs: %v", err)
	}
}
