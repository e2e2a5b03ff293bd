package charts

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/driverauth"
)

func render(t *testing.T, values map[string]any) map[string]string {
	t.Helper()
	c, err := Load(DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(c, values, "dralab-system")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docs splits a rendered template into YAML documents, skipping empty ones.
func docs(s string) []string {
	var out []string
	for _, d := range strings.Split(s, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(d, "---")) != "" && strings.Contains(d, "kind:") {
			out = append(out, d)
		}
	}
	return out
}

func daemonSet(t *testing.T, out map[string]string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(out["dralab-driver/templates/daemonset.yaml"]), &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

func env(ds *appsv1.DaemonSet) map[string]string {
	m := map[string]string{}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			m[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		} else {
			m[e.Name] = e.Value
		}
	}
	return m
}

func TestRendersForEveryProfile(t *testing.T) {
	for _, profile := range append(fakegpu.BuiltinNames(), "") {
		t.Run("profile="+profile, func(t *testing.T) {
			out := render(t, map[string]any{"fake": map[string]any{"profile": profile}})
			e := env(daemonSet(t, out))
			if e["DRALAB_NODE_NAME"] != "fieldRef:spec.nodeName" || e["DRALAB_MODE"] != "dra" || e["DRALAB_CDI_DIR"] != "/var/run/cdi" {
				t.Errorf("driver env = %v", e)
			}
			if profile != "" && e["DRALAB_PROFILE"] != profile {
				t.Errorf("DRALAB_PROFILE = %q, want %q", e["DRALAB_PROFILE"], profile)
			}
			if profile == "" && (e["DRALAB_PROFILE_LABEL"] != gpu.NodeProfileLabel || e["DRALAB_PROFILE"] != "") {
				t.Errorf("without a profile the driver must read the node label: %v", e)
			}
			if e["DRALAB_KUBELET_REGISTRAR_DIR"] != "/var/lib/kubelet/plugins_registry" {
				t.Errorf("registrar dir = %q", e["DRALAB_KUBELET_REGISTRAR_DIR"])
			}
		})
	}
}

// The chart's DeviceClasses are the driver's, selector for selector.
func TestDeviceClassesMatchTheDriver(t *testing.T) {
	out := render(t, nil)
	var got []resourceapi.DeviceClass
	for _, d := range docs(out["dralab-driver/templates/deviceclasses.yaml"]) {
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(d), &c); err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
	}
	want := gpu.DeviceClasses()
	if len(got) != len(want) {
		t.Fatalf("chart has %d classes, driver %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || len(got[i].Spec.Selectors) != len(want[i].Spec.Selectors) {
			t.Errorf("class %d: chart %s, driver %s", i, got[i].Name, want[i].Name)
			continue
		}
		for j := range want[i].Spec.Selectors {
			if g, w := got[i].Spec.Selectors[j].CEL.Expression, want[i].Spec.Selectors[j].CEL.Expression; g != w {
				t.Errorf("class %s selector %d:\n chart  %s\n driver %s", got[i].Name, j, g, w)
			}
		}
	}
}

// RBAC grants what the driver uses and nothing more.
func TestRBACIsLeastPrivilege(t *testing.T) {
	rules := func(values map[string]any) []string {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(docs(render(t, values)["dralab-driver/templates/rbac.yaml"])[0]), &role); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range role.Rules {
			for _, res := range r.Resources {
				out = append(out, res+":"+strings.Join(r.Verbs, ","))
			}
		}
		slices.Sort(out)
		return out
	}
	// lab/chart_test.go derives these verbs from an audit log of the driver.
	want := []string{"nodes:get", "resourceclaims/driver:associated-node:patch", "resourceclaims/status:patch", "resourceclaims:get", "resourceslices:list,watch,create,update,delete"}
	got := rules(nil)
	if !slices.Equal(got, want) {
		t.Errorf("dra mode rules = %v, want %v", got, want)
	}
	for _, r := range got {
		unused := []string{"deletecollection", "*"}
		if !strings.HasPrefix(r, "resourceclaims/") {
			unused = append(unused, "patch")
		}
		for _, unused := range unused {
			if slices.Contains(strings.Split(strings.SplitN(r, ":", 2)[1], ","), unused) {
				t.Errorf("rule %s grants %s, which the driver never calls", r, unused)
			}
		}
	}
	if got := rules(countingValues(nil)); !slices.Equal(got, []string{"nodes:get"}) {
		t.Errorf("device-plugin mode rules = %v, want only nodes:get", got)
	}
}

// The embedded lab grants its drivers internal/driverauth's rules and
// policy: they must be the chart's, so that a driver that works in the lab
// works in a cluster with its chart, and needs no more there.
func TestLabDriversHaveTheChartsPermissions(t *testing.T) {
	role := func(values map[string]any) []rbacv1.PolicyRule {
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(docs(render(t, values)["dralab-driver/templates/rbac.yaml"])[0]), &role); err != nil {
			t.Fatal(err)
		}
		return role.Rules
	}
	for mode, values := range map[string]map[string]any{driverauth.ModeDRA: nil, driverauth.ModeDevicePlugin: countingValues(nil)} {
		if got, want := role(values), driverauth.Rules(gpu.DriverName, mode); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s mode: the chart grants\n%+v\nthe lab grants\n%+v", mode, got, want)
		}
	}
	if got, want := role(map[string]any{"driverName": "gpu.example.com"}), driverauth.Rules("gpu.example.com", driverauth.ModeDRA); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("a fork's driver name: the chart grants\n%+v\nthe lab grants\n%+v", got, want)
	}

	d := docs(render(t, nil)["dralab-driver/templates/validatingadmissionpolicy.yaml"])
	if len(d) != 2 {
		t.Fatalf("the policy template renders %d documents, want a policy and its binding", len(d))
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(d[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(d[1]), &binding); err != nil {
		t.Fatal(err)
	}
	wantPolicy, wantBinding := driverauth.OwnNodeSlices(policy.Name, "dralab-system", "dralab-dralab-driver", gpu.DriverName)
	if !equality.Semantic.DeepEqual(policy.Spec, wantPolicy.Spec) {
		t.Errorf("the chart's policy\n%+v\nthe lab's\n%+v", policy.Spec, wantPolicy.Spec)
	}
	if !equality.Semantic.DeepEqual(binding.Spec, wantBinding.Spec) || binding.Name != wantBinding.Name {
		t.Errorf("the chart's binding %s %+v, the lab's %s %+v", binding.Name, binding.Spec, wantBinding.Name, wantBinding.Spec)
	}
}

func TestAdmissionPolicyPinsSlicesToTheNode(t *testing.T) {
	out := render(t, nil)["dralab-driver/templates/validatingadmissionpolicy.yaml"]
	for _, want := range []string{
		`system:serviceaccount:dralab-system:dralab-dralab-driver`,
		`authentication.kubernetes.io/node-name`,
		`variables.slice.spec.nodeName == variables.nodeName`,
		`variables.slice.spec.driver == "gpu.dralab.dev"`,
		`validationActions: [Deny]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("policy lacks %q:\n%s", want, out)
		}
	}
}

func TestNotes(t *testing.T) {
	notes := render(t, nil)["dralab-driver/templates/NOTES.txt"]
	for _, want := range []string{"gpu.dralab.dev", "h100.gpu.dralab.dev", "l4.gpu.dralab.dev", "kubectl get resourceslices", "kubectl get deviceclasses", "rollout status daemonset/dralab-dralab-driver"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
}

func TestBadValuesFailWithAClearMessage(t *testing.T) {
	c, err := Load(DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		values map[string]any
		want   []string
	}{
		"unknown profile":          {map[string]any{"fake": map[string]any{"profile": "h200-141gb"}}, []string{"/fake/profile", "h100-80gb"}},
		"driverName without a dot": {map[string]any{"driverName": "gpu"}, []string{"driverName"}},
		"unknown driver":           {map[string]any{"driver": "fpga"}, []string{"/driver", "gpu", "nic"}},
		"unknown NIC profile":      {map[string]any{"driver": "nic", "nic": map[string]any{"profile": "cx8-800g"}}, []string{"/nic/profile", "cx7-400g"}},
		"NICs counted":             {map[string]any{"driver": "nic", "mode": "device-plugin", "deviceClasses": map[string]any{"create": false}, "validatingAdmissionPolicy": map[string]any{"enabled": false}}, []string{"driver is nic", "set mode=dra"}},
		"NICs through NVML":        {map[string]any{"driver": "nic", "inventory": "nvml"}, []string{"driver is nic", "set inventory=fake"}},
		"NIC faults":               {map[string]any{"driver": "nic", "faultInjection": true}, []string{"driver is nic", "faultInjection=false"}},
		"unknown value":            {map[string]any{"gpuCount": 3}, []string{"gpuCount"}},
		"bad mode":                 {map[string]any{"mode": "both"}, []string{"mode"}},
		"relative path":            {map[string]any{"cdiDir": "cdi"}, []string{"cdiDir"}},
		"relative driver root":     {map[string]any{"inventory": "nvml", "nvml": map[string]any{"driverRoot": "run/nvidia/driver"}}, []string{"/nvml/driverRoot"}},
		"nvml with profile":        {map[string]any{"inventory": "nvml", "fake": map[string]any{"profile": "l4-24gb"}}, []string{"inventory is nvml"}},
		"loopback API server in the pod network": {map[string]any{"apiServer": map[string]any{"host": "127.0.0.1", "port": 6443}},
			[]string{"apiServer.host", "hostNetwork=true"}},
		"API server with a scheme": {map[string]any{"apiServer": map[string]any{"host": "https://10.0.0.1"}}, []string{"/apiServer/host"}},
		"counting with classes": {map[string]any{"mode": "device-plugin", "validatingAdmissionPolicy": map[string]any{"enabled": false}},
			[]string{"deviceClasses.create=false"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Render(c, tc.values, "dralab-system")
			if err == nil {
				t.Fatal("rendered")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// The schema's profiles are the driver's built-in profiles.
func TestSchemaProfilesAreTheBuiltins(t *testing.T) {
	c, err := Load(DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Fake struct {
				Properties struct {
					Profile struct {
						Enum []string `json:"enum"`
					} `json:"profile"`
				} `json:"properties"`
			} `json:"fake"`
		} `json:"properties"`
	}
	if err := yaml.Unmarshal(c.Schema, &schema); err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(schema.Properties.Fake.Properties.Profile.Enum)
	slices.Sort(got)
	want := append([]string{""}, fakegpu.BuiltinNames()...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json profiles %v, built-in profiles %v", got, want)
	}
}

// The schema's NIC profiles are the NIC driver's.
func TestSchemaNICProfilesAreTheDrivers(t *testing.T) {
	c, err := Load(DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			NIC struct {
				Properties struct {
					Profile struct {
						Enum []string `json:"enum"`
					} `json:"profile"`
				} `json:"properties"`
			} `json:"nic"`
		} `json:"properties"`
	}
	if err := yaml.Unmarshal(c.Schema, &schema); err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(schema.Properties.NIC.Properties.Profile.Enum)
	slices.Sort(got)
	want := append([]string{""}, fakenic.ProfileNames()...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json NIC profiles %v, the NIC driver's %v", got, want)
	}
}

// A release of the NIC driver (driver: nic) runs `dralab-driver nic` with
// its own name, socket, checkpoint directory and identity, so that it sits
// beside the GPU release on the same nodes; its DeviceClasses, rules and
// policy are the ones the embedded lab gives the NIC driver.
func TestNICRelease(t *testing.T) {
	out := render(t, map[string]any{"driver": "nic", "nic": map[string]any{"numaNodeList": true}})
	ds := daemonSet(t, out)
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"nic"}) {
		t.Errorf("args %v, want [nic]", c.Args)
	}
	e := env(ds)
	for name, want := range map[string]string{
		"DRALAB_PROFILE_LABEL": "nic.dralab.dev/profile", "DRALAB_NICS": "1", "DRALAB_NICS_LABEL": "nic.dralab.dev/nics",
		"DRALAB_NUMA_LIST": "true", "DRALAB_CHECKPOINT_DIR": "/var/lib/dralab-nic-driver", "DRALAB_RACK_LABEL": "topology.dralab.dev/rack",
	} {
		if e[name] != want {
			t.Errorf("env %s=%q, want %q", name, e[name], want)
		}
	}
	for _, gpuOnly := range []string{"DRALAB_MODE", "DRALAB_INVENTORY", "DRALAB_GPUS", "DRALAB_PROFILE", "DRALAB_SKIP_NODE_OPERATIONS"} {
		if v, ok := e[gpuOnly]; ok {
			t.Errorf("env %s=%q in the NIC release", gpuOnly, v)
		}
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
	}
	if !slices.Contains(mounts, "/var/lib/kubelet/plugins/nic.dralab.dev") || !slices.Contains(mounts, "/var/lib/dralab-nic-driver") {
		t.Errorf("mounts %v, want the NIC driver's socket and checkpoint directories", mounts)
	}

	var classes []resourceapi.DeviceClass
	for _, d := range docs(out["dralab-driver/templates/deviceclasses.yaml"]) {
		var dc resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(d), &dc); err != nil {
			t.Fatal(err)
		}
		classes = append(classes, dc)
	}
	want := fakenic.DeviceClasses()
	if len(classes) != len(want) {
		t.Fatalf("the NIC release has %d classes, the driver %d", len(classes), len(want))
	}
	for i := range want {
		if classes[i].Name != want[i].Name || classes[i].Spec.Selectors[0].CEL.Expression != want[i].Spec.Selectors[0].CEL.Expression {
			t.Errorf("class %d: chart %s %q, driver %s %q", i, classes[i].Name, classes[i].Spec.Selectors[0].CEL.Expression, want[i].Name, want[i].Spec.Selectors[0].CEL.Expression)
		}
	}

	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict([]byte(docs(out["dralab-driver/templates/rbac.yaml"])[0]), &role); err != nil {
		t.Fatal(err)
	}
	if want := driverauth.Rules(fakenic.DriverName, driverauth.ModeDRA); !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("the NIC release grants\n%+v\nthe lab grants its NIC driver\n%+v", role.Rules, want)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(docs(out["dralab-driver/templates/validatingadmissionpolicy.yaml"])[0]), &policy); err != nil {
		t.Fatal(err)
	}
	wantPolicy, _ := driverauth.OwnNodeSlices(policy.Name, "dralab-system", "dralab-dralab-driver", fakenic.DriverName)
	if !equality.Semantic.DeepEqual(policy.Spec, wantPolicy.Spec) {
		t.Errorf("the NIC release's policy\n%+v\nthe lab's\n%+v", policy.Spec, wantPolicy.Spec)
	}
	if notes := out["dralab-driver/templates/NOTES.txt"]; !strings.Contains(notes, "NIC driver nic.dralab.dev") || !strings.Contains(notes, "rdma.nic.dralab.dev") {
		t.Errorf("NOTES:\n%s", notes)
	}
}

// The chart's default image is the one the lab builds.
func TestAppVersionIsTheDriverImageTag(t *testing.T) {
	c, err := Load(DriverChart)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.AppVersion != build.DriverImageTag {
		t.Errorf("Chart.yaml appVersion %s, driver image tag %s", c.Metadata.AppVersion, build.DriverImageTag)
	}
	if repo := c.Values["image"].(map[string]any)["repository"]; repo != build.DriverImageRepository {
		t.Errorf("values.yaml image.repository %v, driver image %s", repo, build.DriverImageRepository)
	}
}

// Without kube-proxy (the embedded lab's real node), the driver reaches the
// API server on the node's loopback: host network, and the in-cluster
// address overridden.
func TestAPIServerOnTheHostNetwork(t *testing.T) {
	ds := daemonSet(t, render(t, map[string]any{"hostNetwork": true, "apiServer": map[string]any{"host": "127.0.0.1", "port": 41234}}))
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork = %v, dnsPolicy = %q", spec.HostNetwork, spec.DNSPolicy)
	}
	e := env(ds)
	if e["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || e["KUBERNETES_SERVICE_PORT"] != "41234" {
		t.Errorf("API server env = %q:%q", e["KUBERNETES_SERVICE_HOST"], e["KUBERNETES_SERVICE_PORT"])
	}
	def := daemonSet(t, render(t, nil))
	if def.Spec.Template.Spec.HostNetwork {
		t.Error("hostNetwork on by default")
	}
	if _, ok := env(def)["KUBERNETES_SERVICE_HOST"]; ok {
		t.Error("the default overrides the in-cluster API server address")
	}
}

// countingValues are the values of device-plugin mode, which takes neither
// DeviceClasses nor the admission policy.
func countingValues(extra map[string]any) map[string]any {
	v := map[string]any{"mode": "device-plugin", "deviceClasses": map[string]any{"create": false}, "validatingAdmissionPolicy": map[string]any{"enabled": false}}
	maps.Copy(v, extra)
	return v
}

// hostMounts maps each hostPath the driver container mounts to its mount
// path, and fails on any other kind of volume or an unmounted one.
func hostMounts(t *testing.T, ds *appsv1.DaemonSet) map[string]string {
	t.Helper()
	spec := ds.Spec.Template.Spec
	paths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath: %+v", v.Name, v.VolumeSource)
			continue
		}
		paths[v.Name] = v.HostPath.Path
	}
	mounts := map[string]string{}
	for _, m := range spec.Containers[0].VolumeMounts {
		p, ok := paths[m.Name]
		if !ok {
			t.Errorf("mount %s has no hostPath volume", m.Name)
			continue
		}
		mounts[p] = m.MountPath
		delete(paths, m.Name)
	}
	if len(paths) > 0 {
		t.Errorf("volumes never mounted: %v", paths)
	}
	return mounts
}

// The driver gets the directories it writes and nothing else of the node:
// never the kubelet's root directory, which holds every pod's volumes and
// service account tokens. Each mount is at the host's path, which the driver
// is told and the kubelet dials.
func TestMountsOnlyWhatTheDriverWrites(t *testing.T) {
	devicePlugins := strings.TrimSuffix(pluginapi.DevicePluginPath, "/")
	for name, tc := range map[string]struct {
		values map[string]any
		want   []string
		env    map[string]string
	}{
		"dra": {nil,
			[]string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.dralab.dev", "/var/run/cdi", "/var/lib/dralab-driver"},
			map[string]string{"DRALAB_KUBELET_REGISTRAR_DIR": "/var/lib/kubelet/plugins_registry", "DRALAB_KUBELET_PLUGINS_DIR": "/var/lib/kubelet/plugins", "DRALAB_CDI_DIR": "/var/run/cdi", "DRALAB_CHECKPOINT_DIR": "/var/lib/dralab-driver"}},
		"dra, other kubelet root": {map[string]any{"kubeletDir": "/lab/node/kubelet", "cdiDir": "/lab/node/cdi", "checkpointDir": "/lab/node/driver"},
			[]string{"/lab/node/kubelet/plugins_registry", "/lab/node/kubelet/plugins/gpu.dralab.dev", "/lab/node/cdi", "/lab/node/driver"},
			map[string]string{"DRALAB_KUBELET_REGISTRAR_DIR": "/lab/node/kubelet/plugins_registry", "DRALAB_KUBELET_PLUGINS_DIR": "/lab/node/kubelet/plugins", "DRALAB_CDI_DIR": "/lab/node/cdi", "DRALAB_CHECKPOINT_DIR": "/lab/node/driver"}},
		// The kubelet serves device plugins at a fixed path, whatever its
		// root directory.
		"device-plugin": {countingValues(map[string]any{"kubeletDir": "/lab/node/kubelet"}),
			[]string{devicePlugins},
			map[string]string{"DRALAB_KUBELET_DEVICE_PLUGINS_DIR": devicePlugins}},
		// NVML on the host's driver: nothing more; under a driver
		// container's root: that root, read-only (checked below).
		"nvml": {map[string]any{"inventory": "nvml"},
			[]string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.dralab.dev", "/var/run/cdi", "/var/lib/dralab-driver"},
			map[string]string{"DRALAB_DRIVER_ROOT": ""}},
		"nvml, driver root": {map[string]any{"inventory": "nvml", "nvml": map[string]any{"driverRoot": "/run/nvidia/driver"}},
			[]string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.dralab.dev", "/var/run/cdi", "/var/lib/dralab-driver", "/run/nvidia/driver"},
			map[string]string{"DRALAB_DRIVER_ROOT": "/run/nvidia/driver"}},
	} {
		t.Run(name, func(t *testing.T) {
			ds := daemonSet(t, render(t, tc.values))
			mounts := hostMounts(t, ds)
			got := slices.Sorted(maps.Keys(mounts))
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Errorf("host paths = %v, want exactly %v", got, want)
			}
			for host, in := range mounts {
				if host != in {
					t.Errorf("host path %s is mounted at %s: the driver hands the kubelet paths in its own mount namespace", host, in)
				}
			}
			for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == "driver-root" && !m.ReadOnly {
					t.Errorf("the driver root is mounted writable: %+v", m)
				}
			}
			e := env(ds)
			for k, v := range tc.env {
				if e[k] != v {
					t.Errorf("%s = %q, want %q", k, e[k], v)
				}
			}
			// The driver's socket directory is <plugins dir>/<driver name>.
			if p := e["DRALAB_KUBELET_PLUGINS_DIR"]; p != "" {
				if _, ok := mounts[p+"/"+gpu.DriverName]; !ok {
					t.Errorf("the driver's socket directory %s/%s is not mounted", p, gpu.DriverName)
				}
			}
		})
	}
}

// The container runs with no capability, no privilege escalation, the
// runtime's seccomp profile and a read-only image, in every mode and with
// either inventory, but where NVML reads real GPUs: their device files
// need a privileged container (the default) or the NVIDIA container
// runtime, which puts them in an unprivileged one.
func TestSecurityContextIsLeastPrivilege(t *testing.T) {
	mock := map[string]any{"source": "mock:dgxh100"}
	runtime := map[string]any{"deviceAccess": "nvidiaRuntime", "runtimeClassName": "nvidia-cdi"}
	for name, tc := range map[string]struct {
		values     map[string]any
		privileged bool
		runtime    string
	}{
		"fake, dra":                    {nil, false, ""},
		"nvml mock, dra":               {map[string]any{"inventory": "nvml", "nvml": mock}, false, ""},
		"fake, device-plugin":          {countingValues(nil), false, ""},
		"nvml mock, device-plugin":     {countingValues(map[string]any{"inventory": "nvml", "nvml": mock}), false, ""},
		"nvml, NVIDIA runtime":         {map[string]any{"inventory": "nvml", "nvml": runtime}, false, "nvidia-cdi"},
		"nvml, dra":                    {map[string]any{"inventory": "nvml"}, true, ""},
		"nvml, device-plugin":          {countingValues(map[string]any{"inventory": "nvml"}), true, ""},
		"nvml mock, NVIDIA runtime":    {map[string]any{"inventory": "nvml", "nvml": map[string]any{"source": "mock:mixed", "deviceAccess": "nvidiaRuntime"}}, false, ""},
		"fake, NVIDIA runtime ignored": {map[string]any{"nvml": runtime}, false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			pod := daemonSet(t, render(t, tc.values)).Spec.Template.Spec
			if pod.HostPID || pod.HostIPC {
				t.Errorf("hostPID = %v, hostIPC = %v", pod.HostPID, pod.HostIPC)
			}
			sc := pod.Containers[0].SecurityContext
			if sc == nil {
				t.Fatal("the driver container has no securityContext")
			}
			if sc.Privileged == nil || *sc.Privileged != tc.privileged {
				t.Errorf("privileged = %v, want %v", ptrString(sc.Privileged), tc.privileged)
			}
			if got := ptrString(pod.RuntimeClassName); (tc.runtime == "" && pod.RuntimeClassName != nil) || (tc.runtime != "" && got != tc.runtime) {
				t.Errorf("runtimeClassName = %v, want %q", got, tc.runtime)
			}
			e := env(daemonSet(t, render(t, tc.values)))
			if visible := e["NVIDIA_VISIBLE_DEVICES"]; (tc.runtime != "") != (visible == "all") {
				t.Errorf("NVIDIA_VISIBLE_DEVICES = %q with runtime class %q: the NVIDIA runtime, and it alone, is asked for every GPU", visible, tc.runtime)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("readOnlyRootFilesystem = %v, want true", ptrString(sc.ReadOnlyRootFilesystem))
			}
			if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccompProfile = %+v, want RuntimeDefault", sc.SeccompProfile)
			}
			if tc.privileged {
				// The API refuses a privileged container that forbids
				// privilege escalation.
				if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
					t.Errorf("privileged with allowPrivilegeEscalation false: the API server refuses the pod")
				}
				return
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("allowPrivilegeEscalation = %v, want false", ptrString(sc.AllowPrivilegeEscalation))
			}
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
			}
		})
	}
}

// The driver's --nvml comes from nvml.source: unset for the library (the
// driver's default), the mock server as named.
func TestNVMLSource(t *testing.T) {
	for source, want := range map[string]string{"library": "", "mock:dgxa100-mig": "mock:dgxa100-mig"} {
		e := env(daemonSet(t, render(t, map[string]any{"inventory": "nvml", "nvml": map[string]any{"source": source}})))
		if got, set := e["DRALAB_NVML"]; got != want || set != (want != "") {
			t.Errorf("nvml.source %s: DRALAB_NVML = %q (set %v), want %q", source, got, set, want)
		}
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// Lint is `helm lint --strict` through the SDK: the chart passes with its
// defaults, and a template that cannot render fails it, naming the file.
func TestLint(t *testing.T) {
	if msgs, err := Lint(DriverChart, nil); err != nil {
		t.Fatalf("lint of %s: %v\n%s", DriverChart, err, strings.Join(msgs, "\n"))
	}
	broken := filepath.Join(t.TempDir(), DriverChart)
	if err := os.CopyFS(broken, os.DirFS(DriverChart)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "templates", "broken.yaml"), []byte("kind: ConfigMap\nname: {{ .Values.nothing.here }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	msgs, err := Lint(broken, nil)
	if err == nil || !strings.Contains(strings.Join(msgs, "\n"), "broken.yaml") {
		t.Errorf("lint of a chart with a template that cannot render = %v\n%s", err, strings.Join(msgs, "\n"))
	}
	if _, err := Lint(filepath.Join(t.TempDir(), "none"), nil); err == nil || !strings.Contains(err.Error(), "Chart.yaml") {
		t.Errorf("lint of a directory without a chart = %v, want an error naming Chart.yaml", err)
	}
}
