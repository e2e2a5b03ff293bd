// The sanity layer of the conformance suite (drivers/conformance/sanity)
// checked on drivers built with the kit: a right one passes every check,
// and drivers wrong in one way each fail the rule they break.
package kit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/kit"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	driverName = "gpu.test.dev"
	nodeName   = "node-a"
	cdiKind    = "test.dev/gpu"
)

const driverManifest = `
apiVersion: conformance.dralab.dev/v1alpha1
kind: DriverManifest
driver: gpu.test.dev
deviceClass: gpu.test.dev
proof:
  env: {name: GPU_DEVICE_0, pattern: "^gpu-[0-9]+$"}
timeouts:
  prepare: 10s
`

type staticInventory []kit.Device

func (s staticInventory) Devices(context.Context) ([]kit.Device, error) { return s, nil }

func inventory(n int) staticInventory {
	var devs staticInventory
	for i := range n {
		name := fmt.Sprintf("gpu-%d", i)
		devs = append(devs, kit.Device{
			API: resourceapi.Device{Name: name},
			Env: map[string]string{"": name},
		})
	}
	return devs
}

// node is one node of a fake cluster with a driver built on the kit: what
// the kubelet would see, minus the kubelet, which the sanity checks play.
type node struct {
	t      *testing.T
	ctx    context.Context
	dir    string
	client *fake.Clientset
	opts   kit.Options
	// start starts the driver and returns how to stop it: each double
	// starts its own way.
	start func() (stop func(), err error)
	stop  func()
}

func newNode(t *testing.T, devices int) *node {
	t.Helper()
	// Not t.TempDir: its long path would push the sockets past the
	// 108-byte limit of unix socket paths.
	dir, err := os.MkdirTemp("", "san-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)

	// The slice controller makes the Node own the ResourceSlice, so the
	// Node needs a UID.
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	client.PrependReactor("create", "resourceclaims", nameAndUID)
	n := &node{t: t, ctx: ctx, dir: dir, client: client}
	n.opts = kit.Options{
		DriverName: driverName, NodeName: nodeName, KubeClient: client,
		RegistrarDir: filepath.Join(dir, "registry"), PluginDir: filepath.Join(dir, "plugin"),
		CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: filepath.Join(dir, "state", "checkpoint.json"),
		CDIKind: cdiKind, EnvPrefix: "GPU_DEVICE", Inventory: inventory(devices),
	}
	if err := os.MkdirAll(n.opts.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	n.start = func() (func(), error) {
		d, err := kit.Start(n.ctx, n.opts)
		if err != nil {
			return nil, err
		}
		return d.Stop, nil
	}
	t.Cleanup(func() {
		if n.stop != nil {
			n.stop()
		}
	})
	return n
}

// nameAndUID does what the API server does and the fake clientset does
// not: it names a claim created with generateName and gives it a UID,
// which the kubelet plugin compares with the one in the gRPC call.
func nameAndUID(action k8stesting.Action) (bool, runtime.Object, error) {
	c := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
	if c.Name == "" && c.GenerateName != "" {
		c.Name = c.GenerateName + rand.String(5)
	}
	if c.UID == "" {
		c.UID = uuid.NewUUID()
	}
	return false, nil, nil // the tracker stores the object
}

func (n *node) run() {
	n.t.Helper()
	stop, err := n.start()
	if err != nil {
		n.t.Fatal(err)
	}
	n.stop = stop
}

// restart is Config.Restart for an in-process driver: the new driver lives
// on the node's context, not on the check's.
func (n *node) restart(context.Context) error {
	n.stop()
	n.stop = nil
	stop, err := n.start()
	if err != nil {
		return err
	}
	n.stop = stop
	return nil
}

func (n *node) config() sanity.Config {
	m, err := manifest.Parse("driver.yaml", []byte(driverManifest))
	if err != nil {
		n.t.Fatal(err)
	}
	return sanity.Config{
		Manifest: m, Client: n.client, NodeName: nodeName,
		RegistrarDir: n.opts.RegistrarDir, CDIDir: n.opts.CDIDir, Namespace: "sanity",
		Restart: n.restart,
	}
}

// runChecks runs the checks and returns their results by check, logging
// them for a failing test's reader.
func (n *node) runChecks(cfg sanity.Config) map[string]sanity.Result {
	n.t.Helper()
	results := sanity.Run(n.ctx, cfg)
	if len(results) != len(sanity.Checks()) {
		n.t.Fatalf("Run returned %d results for %d checks", len(results), len(sanity.Checks()))
	}
	byCheck := map[string]sanity.Result{}
	for _, r := range results {
		n.t.Logf("%s: %s (%v) %s", r.Check, r.Status, r.Elapsed.Round(time.Millisecond), r.Message)
		byCheck[r.Check] = r
	}
	return byCheck
}

// expect asserts each check's status; a failure's message must start with
// the rule named in want, e.g. "fail:cdi-ids-resolve".
func expect(t *testing.T, got map[string]sanity.Result, want map[string]string) {
	t.Helper()
	for _, c := range sanity.Checks() {
		r, w := got[c.Name], want[c.Name]
		status, rule, _ := strings.Cut(w, ":")
		if !strings.EqualFold(string(r.Status), status) {
			t.Errorf("check %s: %s (%s), want %s", c.Name, r.Status, r.Message, status)
			continue
		}
		if rule != "" && !strings.HasPrefix(r.Message, rule+": ") {
			t.Errorf("check %s: message %q does not start with the broken rule %q", c.Name, r.Message, rule)
		}
		if r.Rule != c.Rule {
			t.Errorf("check %s: result rule %q, want %q", c.Name, r.Rule, c.Rule)
		}
	}
}

func allPass() map[string]string {
	want := map[string]string{}
	for _, c := range sanity.Checks() {
		want[c.Name] = "pass"
	}
	return want
}

// leftovers fails the test if a check left a claim or a CDI spec behind.
func (n *node) leftovers() {
	n.t.Helper()
	claims, err := n.client.ResourceV1().ResourceClaims("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	if len(claims.Items) > 0 {
		n.t.Errorf("claims left behind: %d, first %s", len(claims.Items), claims.Items[0].Name)
	}
	specs, _ := os.ReadDir(n.opts.CDIDir)
	specs = slices.DeleteFunc(specs, func(e os.DirEntry) bool { return e.Name() == extraSpec })
	if len(specs) > 0 {
		n.t.Errorf("CDI specs left behind: %v", specs)
	}
}

func TestKitDriverPassesEveryCheck(t *testing.T) {
	n := newNode(t, 4)
	n.run()
	expect(t, n.runChecks(n.config()), allPass())
	n.leftovers()
}

// The library's main use: a driver's own test calls sanity.Test.
func TestSanityTestOnKitDriver(t *testing.T) {
	n := newNode(t, 4)
	n.run()
	sanity.Test(t, n.config())
	n.leftovers()
}

// cdiRewriter is a driver that prepares devices with the kit but hands
// the kubelet the CDI IDs rewrite makes of each device's, and defines the
// extra CDI devices it names in a spec of its own: a double of a driver's
// way of naming CDI devices.
type cdiRewriter struct {
	*kit.Driver
	rewrite func(d kubeletplugin.Device) []string
}

func (r cdiRewriter) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results, err := r.Driver.PrepareResourceClaims(ctx, claims)
	for uid, res := range results {
		devices := make([]kubeletplugin.Device, len(res.Devices))
		for i, d := range res.Devices {
			// A new slice: the kit's own shares memory with its checkpoint.
			d.CDIDeviceIDs = r.rewrite(d)
			devices[i] = d
		}
		res.Devices = devices
		results[uid] = res
	}
	return results, err
}

// extraSpec is a cdiRewriter's own CDI spec, which lives as long as the
// driver.
const extraSpec = "test.dev-gpu-extra.json"

// serveRewritingCDI makes the node's driver a cdiRewriter; extra names the
// CDI devices (of kind cdiKind) its spec defines, which resolve.
func (n *node) serveRewritingCDI(rewrite func(d kubeletplugin.Device) []string, extra ...string) {
	n.start = func() (func(), error) {
		// The kit driver registers in a registry the checks do not read
		// and keeps publishing the slice; the double registers in the
		// real one and serves the kubelet.
		inner := n.opts
		inner.RegistrarDir = filepath.Join(n.dir, "inner-registry")
		if err := os.MkdirAll(inner.RegistrarDir, 0o750); err != nil {
			return nil, err
		}
		d, err := kit.Start(n.ctx, inner)
		if err != nil {
			return nil, err
		}
		specFile := filepath.Join(n.opts.CDIDir, extraSpec)
		if len(extra) > 0 {
			spec := cdispec.Spec{Version: cdispec.CurrentVersion, Kind: cdiKind}
			for _, name := range extra {
				spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: cdispec.ContainerEdits{Env: []string{"EXTRA=" + name}}})
			}
			data, err := json.Marshal(spec)
			if err == nil {
				err = os.WriteFile(specFile, data, 0o644)
			}
			if err != nil {
				d.Stop()
				return nil, err
			}
		}
		pluginDir := filepath.Join(n.dir, "double")
		if err := os.MkdirAll(pluginDir, 0o750); err != nil {
			d.Stop()
			return nil, err
		}
		h, err := kubeletplugin.Start(n.ctx, cdiRewriter{Driver: d, rewrite: rewrite},
			kubeletplugin.KubeClient(n.client),
			kubeletplugin.NodeName(nodeName),
			kubeletplugin.DriverName(driverName),
			kubeletplugin.RegistrarDirectoryPath(n.opts.RegistrarDir),
			kubeletplugin.PluginDataDirectoryPath(pluginDir),
			kubeletplugin.HealthService(false),
		)
		if err != nil {
			d.Stop()
			return nil, err
		}
		return func() { h.Stop(); d.Stop(); _ = os.Remove(specFile) }, nil
	}
	n.run()
}

func TestUnresolvableCDIIDsFailTheirRule(t *testing.T) {
	n := newNode(t, 4)
	// IDs that no spec defines: containers would fail to start.
	n.serveRewritingCDI(func(d kubeletplugin.Device) []string { return []string{cdiKind + "=ghost-" + d.DeviceName} })
	want := allPass()
	want["cdi-ids-resolve"] = "fail:cdi-ids-resolve"
	// These need resolvable IDs too, and say which rule broke.
	want["concurrent"] = "fail:cdi-ids-resolve"
	want["restart"] = "fail:cdi-ids-resolve"
	got := n.runChecks(n.config())
	expect(t, got, want)
	if msg := got["cdi-ids-resolve"].Message; !strings.Contains(msg, `"test.dev/gpu=ghost-gpu-0"`) || !strings.Contains(msg, "is in no spec under "+n.opts.CDIDir) {
		t.Errorf("cdi-ids-resolve message %q does not name the ID and the spec directory", msg)
	}
	n.leftovers()
}

// A driver-wide CDI device, returned with every claim beside the claim's
// own (reference drivers put node-wide edits there), is legal: the
// concurrent check passes and names it.
func TestDriverWideCDIDevicePasses(t *testing.T) {
	n := newNode(t, 4)
	n.serveRewritingCDI(func(d kubeletplugin.Device) []string {
		return append(slices.Clone(d.CDIDeviceIDs), cdiKind+"=common")
	}, "common")
	got := n.runChecks(n.config())
	expect(t, got, allPass())
	if msg := got["concurrent"].Message; !strings.Contains(msg, "4 claims") || !strings.Contains(msg, `driver-wide ["test.dev/gpu=common"]`) {
		t.Errorf("concurrent message %q does not say 4 claims passed with the driver-wide device", msg)
	}
	n.leftovers()
}

// Claims with different devices that share a CDI device returned for some
// claims but not all, or that get only what every claim gets, fail the
// concurrent check, naming the ID and the claims.
func TestSharedCDIDevicesOfClaimsFail(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite func(d kubeletplugin.Device) []string
		extra   []string
		want    []string
	}{{
		// gpu-0 and gpu-2 share one, gpu-1 and gpu-3 another.
		name: "shared by some claims",
		rewrite: func(d kubeletplugin.Device) []string {
			n, _ := strconv.Atoi(strings.TrimPrefix(d.DeviceName, "gpu-"))
			return append(slices.Clone(d.CDIDeviceIDs), fmt.Sprintf("%s=pair-%d", cdiKind, n%2))
		},
		extra: []string{"pair-0", "pair-1"},
		want:  []string{`CDI device "test.dev/gpu=pair-0" is returned for claims sanity/sanity-`, "which have different devices, and not for sanity/sanity-", "neither a claim's own nor driver-wide"},
	}, {
		// Every claim gets the first device's edits, whatever its device.
		name:    "only what every claim gets",
		rewrite: func(kubeletplugin.Device) []string { return []string{cdiKind + "=first"} },
		extra:   []string{"first"},
		want:    []string{"gets no CDI device of its own, only [\"test.dev/gpu=first\"]"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, 4)
			n.serveRewritingCDI(tc.rewrite, tc.extra...)
			want := allPass()
			want["concurrent"] = "fail:concurrent"
			got := n.runChecks(n.config())
			expect(t, got, want)
			for _, w := range tc.want {
				if msg := got["concurrent"].Message; !strings.Contains(msg, w) {
					t.Errorf("concurrent message %q does not say %q", msg, w)
				}
			}
			n.leftovers()
		})
	}
}

func TestDriverForgettingClaimsOnRestartFails(t *testing.T) {
	n := newNode(t, 4)
	n.run()
	cfg := n.config()
	cfg.Restart = func(ctx context.Context) error {
		n.stop()
		n.stop = nil
		// What a driver keeping its state in a tmpfs, or in its
		// container, loses when it restarts.
		if err := os.Remove(n.opts.CheckpointPath); err != nil {
			return err
		}
		specs, _ := filepath.Glob(filepath.Join(n.opts.CDIDir, "*"))
		for _, s := range specs {
			if err := os.Remove(s); err != nil {
				return err
			}
		}
		stop, err := n.start()
		n.stop = stop
		return err
	}
	want := allPass()
	want["restart"] = "fail:restart"
	got := n.runChecks(cfg)
	expect(t, got, want)
	if msg := got["restart"].Message; !strings.Contains(msg, "before the restart is in no spec") || !strings.Contains(msg, "forgot") {
		t.Errorf("restart message %q does not say the driver forgot a prepared claim", msg)
	}
	n.leftovers()
}

// Without a way to restart the driver the restart check is not verified:
// a failure, or a skip that says so when unverified checks are allowed. A
// manifest that says the driver may not be restarted skips it.
func TestRestartSkipped(t *testing.T) {
	n := newNode(t, 4)
	n.run()
	want := allPass()
	want["restart"] = "fail:not verified"

	cfg := n.config()
	cfg.Restart = nil
	got := n.runChecks(cfg)
	expect(t, got, want)
	if msg := got["restart"].Message; !strings.Contains(msg, "Restart") {
		t.Errorf("reason %q does not mention the missing Restart", msg)
	}

	cfg.AllowUnverified = true
	want["restart"] = "skip:not verified"
	expect(t, n.runChecks(cfg), want)

	want["restart"] = "skip"
	cfg = n.config()
	cfg.Manifest.Sanity.Restartable = false
	got = n.runChecks(cfg)
	expect(t, got, want)
	if msg := got["restart"].Message; !strings.Contains(msg, "restartable: false") {
		t.Errorf("skip reason %q does not name the manifest's setting", msg)
	}
}

// A driver that is not running fails registration, and the checks that
// need it say so, rather than hanging or panicking.
func TestNoDriverFailsRegistration(t *testing.T) {
	n := newNode(t, 4)
	cfg := n.config()
	cfg.Restart = nil
	want := map[string]string{}
	for _, c := range sanity.Checks() {
		want[c.Name] = "fail:registration"
	}
	// No way to restart it either: not verified, before any call.
	want["restart"] = "fail:not verified"
	got := n.runChecks(cfg)
	expect(t, got, want)
	if msg := got["registration"].Message; !strings.Contains(msg, "no socket in "+n.opts.RegistrarDir) {
		t.Errorf("registration message %q does not name the registry", msg)
	}
}
