package charts

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
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
	want := []string{"nodes:get", "resourceclaims:get", "resourceslices:get,list,watch,create,update,patch,delete,deletecollection"}
	if got := rules(nil); !slices.Equal(got, want) {
		t.Errorf("dra mode rules = %v, want %v", got, want)
	}
	dp := map[string]any{"mode": "device-plugin", "deviceClasses": map[string]any{"create": false}, "validatingAdmissionPolicy": map[string]any{"enabled": false}}
	if got := rules(dp); !slices.Equal(got, []string{"nodes:get"}) {
		t.Errorf("device-plugin mode rules = %v, want only nodes:get", got)
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
		"unknown profile":    {map[string]any{"fake": map[string]any{"profile": "h200-141gb"}}, []string{"/fake/profile", "h100-80gb"}},
		"missing driverName": {map[string]any{"driverName": ""}, []string{"driverName"}},
		"unknown value":      {map[string]any{"gpuCount": 3}, []string{"gpuCount"}},
		"bad mode":           {map[string]any{"mode": "both"}, []string{"mode"}},
		"relative path":      {map[string]any{"cdiDir": "cdi"}, []string{"cdiDir"}},
		"nvml with profile":  {map[string]any{"inventory": "nvml", "fake": map[string]any{"profile": "l4-24gb"}}, []string{"inventory is nvml"}},
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
