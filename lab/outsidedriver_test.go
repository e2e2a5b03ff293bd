package lab_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab/config"
)

// TestOutsideDriverLab is a driver author's CI without Docker: a lab
// configuration runs an outside kubelet plugin binary on every node (here
// dralab-driver, given only a command line with placeholders and its
// DeviceClasses as a manifest file, as any other driver would be), and the
// conformance suite's two layers pass against it.
func TestOutsideDriverLab(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	cfg := outsideDriverLab(t, "t-byo", bin, []string{"--node-name={nodeName}", "--gpus=4"}, nil)
	l, _, client := upLab(ctx, t, stateRoot(t), bin, cfg)
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if !n.Healthy || n.Profile != gpu.DriverName {
			t.Errorf("node %+v: want healthy, serving %s", n, gpu.DriverName)
		}
	}
	runConformance(ctx, t, l, client, wholeGPUManifest(t, nil))
}

// wholeGPUManifest writes drivers/fakegpu/driver.yaml for a lab whose
// outside driver publishes whole GPUs only (one command line for every
// node: no MIG node, no shared node, no fabric node beside the others),
// with partitionable devices, consumable capacity, binding conditions,
// resource health (whose commands fail GPUs of dralab's own driver only)
// derived attributes (an alpha gate the lab leaves off) and device
// metadata (its command does not ask for it) disabled, and
// each of replace's keys
// replaced by its value, once.
func wholeGPUManifest(t *testing.T, replace map[string]string) string {
	t.Helper()
	data, err := os.ReadFile("../drivers/fakegpu/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := string(data)
	all := map[string]string{
		"DRAPartitionableDevices: true":    "DRAPartitionableDevices: false",
		"DRAConsumableCapacity: true":      "DRAConsumableCapacity: false",
		"DRADeviceBindingConditions: true": "DRADeviceBindingConditions: false",
		// gpu:fail reaches dralab's GPU driver only.
		"ResourceHealthStatus: true": "ResourceHealthStatus: false",
		// The lab's gates stay at their defaults.
		"DRADerivedAttributes: true": "DRADerivedAttributes: false",
		// The outside driver's command gives no device metadata.
		"DeviceMetadata: true": "DeviceMetadata: false",
		// Nor does it publish what its devices cost the node.
		"DRANodeAllocatableResources: true": "DRANodeAllocatableResources: false",
	}
	maps.Copy(all, replace)
	for from, to := range all {
		if strings.Count(m, from) != 1 {
			t.Fatalf("drivers/fakegpu/driver.yaml has no %s to replace", from)
		}
		m = strings.Replace(m, from, to, 1)
	}
	file := filepath.Join(t.TempDir(), "driver.yaml")
	if err := os.WriteFile(file, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestOutsideDriverAsDeployed runs an outside driver configured the way a
// DaemonSet configures one, the issue an upstream reference driver met on
// the lab: fixed metrics and health ports (a {port:<name>} placeholder per
// node, in a command word and in an env value), the node's name from a
// per-node env value rather than a flag, a pod UID (rolling-update
// sockets), 40 devices a node (more than a claim may hold), and a proof
// naming its variable by pattern. The lab comes up on both nodes, each
// driver answers on ports of its own, its DRA sockets carry the pod UID,
// and the conformance run passes, the checks of a claim for every device
// among them.
func TestOutsideDriverAsDeployed(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	podUID := string(uuid.NewUUID())
	const devices = 40
	cfg := outsideDriverLab(t, "t-byo-deployed", bin,
		[]string{fmt.Sprintf("--gpus=%d", devices), "--metrics-address=127.0.0.1:{port:metrics}"},
		map[string]string{
			"DRALAB_NODE_NAME":       "{nodeName}",
			"DRALAB_POD_UID":         podUID,
			"DRALAB_HEALTHZ_ADDRESS": "127.0.0.1:{port:healthz}",
		})
	const byName, byPattern = `env: {name: GPU_DEVICE_0, pattern: "^gpu-[0-9]+$"}`, `env: {namePattern: "^GPU_DEVICE_[0-9]+$", pattern: "^gpu-[0-9]+$"}`
	manifestFile := wholeGPUManifest(t, map[string]string{byName: byPattern})

	start := time.Now()
	l, _, client := upLab(ctx, t, stateRoot(t), bin, cfg)
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab up with %d nodes in %v", len(st.Nodes), time.Since(start).Round(time.Second))
	if len(st.Nodes) != 2 {
		t.Fatalf("%d nodes, want 2", len(st.Nodes))
	}

	// No --node-name: each node publishing all its devices is the
	// driver taking its node's name from the env value.
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + gpu.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	published := map[string]int{}
	for _, s := range list.Items {
		if s.Spec.NodeName != nil {
			published[*s.Spec.NodeName] += len(s.Spec.Devices)
		}
	}
	served := map[string]string{}
	for _, n := range st.Nodes {
		if !n.Healthy || n.DriverPID == 0 {
			t.Errorf("node %s: healthy %v, driver PID %d: want a healthy node with a running driver", n.Name, n.Healthy, n.DriverPID)
			continue
		}
		if published[n.Name] != devices {
			t.Errorf("node %s publishes %d devices of %s, want %d", n.Name, published[n.Name], gpu.DriverName, devices)
		}
		p := driverProcess(t, n.DriverPID)
		if got := p.env["DRALAB_NODE_NAME"]; got != n.Name {
			t.Errorf("node %s: the driver's DRALAB_NODE_NAME is %q", n.Name, got)
		}
		for path, address := range p.endpoints() {
			if other, dup := served[address]; dup {
				t.Errorf("node %s serves %s on %s, where %s is", n.Name, path, address, other)
			}
			served[address] = n.Name + " " + path
			if code, body := get(ctx, t, "http://"+address+path); code != http.StatusOK {
				t.Errorf("node %s: %s on %s answers %d: %s", n.Name, path, address, code, body)
			}
		}
		// Rolling-update sockets: the kubelet finds the plugin by names
		// that carry the pod's UID.
		for _, socket := range []string{
			filepath.Join(n.PluginsDir, gpu.DriverName, "dra-"+podUID+".sock"),
			filepath.Join(n.RegistrarDir, kubeletplugin.RollingUpdateRegistrarSocketFile(n.RegistrarDir, gpu.DriverName, types.UID(podUID))),
		} {
			if fi, err := os.Stat(socket); err != nil || fi.Mode().Type() != os.ModeSocket {
				t.Errorf("node %s: want the socket %s (%v)", n.Name, socket, err)
			}
		}
	}
	if len(served) != 4 {
		t.Errorf("the drivers serve %v, want 4 addresses: health and metrics of each of 2 nodes", served)
	}
	if t.Failed() {
		t.FailNow()
	}

	start = time.Now()
	report, err := scratchlab.Conformance(ctx, conformance.Options{Manifest: manifestFile, Kubeconfig: l.Kubeconfig()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance run: %v", time.Since(start).Round(time.Second))
	requirePassed(t, report, "sanity/concurrent", "sanity/restart", "cluster/single device",
		"cluster/shared claim", "cluster/prioritized list", "cluster/admin access", "cluster/device taints")
	// The driver returns its driver-wide CDI device with every claim: the
	// concurrent check passed with it, not without it.
	wide := `driver-wide ["` + gpu.CDIKind + `=node"]`
	if !slices.ContainsFunc(report.Cases, func(c results.Case) bool {
		return c.Name == "sanity/concurrent" && strings.Contains(c.Output, wide)
	}) {
		t.Errorf("the concurrent check's output does not say %s", wide)
	}

	// The claims the run prepared show in the drivers' metrics (the
	// restart check restarted one driver: its process is read afresh).
	if st, err = l.Status(ctx); err != nil {
		t.Fatal(err)
	}
	prepares := 0.0
	for _, n := range st.Nodes {
		address := driverProcess(t, n.DriverPID).endpoints()["/metrics"]
		_, body := get(ctx, t, "http://"+address+"/metrics")
		prepares += metric(body, `dralab_driver_claim_operations_total{driver="gpu.dralab.dev",operation="prepare"}`)
	}
	if prepares == 0 {
		t.Error("no driver's /metrics counts a prepare after the conformance run")
	}
}

// outsideDriverLab is a lab of two nodes running dralab-driver as an
// outside driver, as any other driver would be: a command line with
// placeholders (credentials, the node's directories, H100s, then words),
// env, and its DeviceClasses as a manifest file. It is written to a file
// and loaded, as a user's would be.
func outsideDriverLab(t *testing.T, name, bin string, words []string, env map[string]string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	var classes []byte
	for _, c := range gpu.DeviceClasses() {
		data, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		classes = append(append(classes, "---\n"...), data...)
	}
	if err := os.WriteFile(filepath.Join(dir, "classes.yaml"), classes, 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(&config.Config{
		APIVersion: config.APIVersion, Kind: config.Kind, Name: name,
		Nodes: []config.Node{{Name: "node-a"}, {Name: "node-b"}},
		Driver: &config.Driver{
			Name: gpu.DriverName,
			Command: append([]string{filepath.Join(filepath.Dir(bin), build.DriverBinary),
				"--kubeconfig={kubeconfig}", "--kubelet-registrar-dir={registrarDir}", "--kubelet-plugins-dir={pluginsDir}",
				"--cdi-dir={cdiDir}", "--checkpoint-dir={stateDir}", "--profile=h100-80gb"}, words...),
			Env:       env,
			Manifests: []string{"classes.yaml"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	// The fake driver's manifest checks group claims.
	cfg.EnableGroupClaims()
	return cfg
}

// process is a running process's command line and environment.
type process struct {
	args []string
	env  map[string]string
}

// driverProcess reads the command line and environment the lab started a
// driver with, placeholders filled in.
func driverProcess(t *testing.T, pid int) process {
	t.Helper()
	read := func(what string) []string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, what))
		if err != nil {
			t.Fatalf("the driver process %d: %v", pid, err)
		}
		return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	}
	p := process{args: read("cmdline"), env: map[string]string{}}
	for _, kv := range read("environ") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			p.env[k] = v
		}
	}
	return p
}

// endpoints are the driver's HTTP paths by address: /healthz from its env,
// /metrics from its command line.
func (p process) endpoints() map[string]string {
	out := map[string]string{"/healthz": p.env["DRALAB_HEALTHZ_ADDRESS"]}
	for _, a := range p.args {
		if v, ok := strings.CutPrefix(a, "--metrics-address="); ok {
			out["/metrics"] = v
		}
	}
	return out
}

// get polls url until it answers 200, for at most 30 s, and returns the
// last status and body; a driver's /healthz answers 503 until the kubelet
// has registered it.
func get(ctx context.Context, t *testing.T, url string) (int, string) {
	t.Helper()
	var (
		code    int
		body    string
		lastErr error
	)
	const timeout = 30 * time.Second
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			lastErr = err
			return false, nil
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(data)
		return code == http.StatusOK, nil
	})
	if code == 0 {
		t.Errorf("waited %v for %s to answer: %v", timeout, url, lastErr)
	}
	return code, body
}

// metric returns the value of a series in Prometheus's text format, 0
// when it is missing.
func metric(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return 0
}

// requirePassed fails the test if a check of the report failed, or if a
// named check (a test, with its subtests) did not run or did not pass
// every part: a skipped assessment leaves its feature passed.
func requirePassed(t *testing.T, r *results.Report, checks ...string) {
	t.Helper()
	for _, c := range r.Cases {
		t.Logf("%s %s (%v) %s", c.Status, c.Name, c.Elapsed.Round(time.Millisecond), c.Message)
		if c.Status == results.Failed {
			t.Errorf("check %s failed: %s\n%s", c.Name, c.Message, c.Output)
		}
	}
	for _, want := range checks {
		cases := slices.DeleteFunc(slices.Clone(r.Cases), func(c results.Case) bool {
			return c.Name != want && !strings.HasPrefix(c.Name, want+"/")
		})
		if len(cases) == 0 {
			t.Errorf("check %s did not run", want)
		}
		for _, c := range cases {
			if c.Status != results.Passed {
				t.Errorf("check %s: %s %s", c.Name, c.Status, c.Message)
			}
		}
	}
}
