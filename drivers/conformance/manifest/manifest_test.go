package manifest

import (
	"encoding/json"
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/nearest"
)

func TestExampleLoads(t *testing.T) {
	m, err := Load("testdata/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Manifest{
		APIVersion:         APIVersion,
		Kind:               Kind,
		Driver:             "gpu.dralab.dev",
		DeviceClass:        "gpu.dralab.dev",
		PrioritizedClasses: []string{"h100.gpu.dralab.dev", "a100.gpu.dralab.dev", "l4.gpu.dralab.dev"},
		Capabilities: map[Capability]bool{
			DRAPrioritizedList:      true,
			DRAAdminAccess:          true,
			DRADeviceTaints:         true,
			DRAExtendedResource:     true,
			DRAPartitionableDevices: false,
			SharedClaims:            true,
			OpaqueConfig:            true,
		},
		ExtendedResourceName: "dralab.dev/gpu",
		OpaqueConfig: &OpaqueConfigSample{
			Valid:   json.RawMessage(`{"apiVersion":"gpu.dralab.dev/v1alpha1","kind":"GPUConfig","timeSlicing":{"interval":"Short"}}`),
			Invalid: json.RawMessage(`{"apiVersion":"gpu.dralab.dev/v1alpha1","kind":"GPUConfig","timeSlicing":{"interval":"Forever"}}`),
		},
		Proof:    Proof{Env: &EnvProof{Name: "GPU_DEVICE_0", Pattern: "^gpu-[0-9]+$"}},
		Timeouts: Timeouts{PodRunning: 90 * time.Second, Prepare: DefaultPrepareTimeout},
		Sanity:   Sanity{Restartable: false},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Load = %+v\nwant %+v", m, want)
	}
	for c, want := range map[Capability]bool{DRAAdminAccess: true, DRAPartitionableDevices: false, DRAConsumableCapacity: false} {
		if got := m.Enabled(c); got != want {
			t.Errorf("Enabled(%s) = %v, want %v", c, got, want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/no-such-driver.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want fs.ErrNotExist", err)
	}
}

const minimal = `apiVersion: conformance.dralab.dev/v1alpha1
kind: DriverManifest
driver: gpu.example.com
deviceClass: gpu.example.com
proof:
  command: {args: [nvidia-smi, -L], pattern: "GPU [0-9]+"}
`

func TestMinimalRoundTripsWithDefaults(t *testing.T) {
	m, err := Parse("driver.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := &Manifest{
		APIVersion:  APIVersion,
		Kind:        Kind,
		Driver:      "gpu.example.com",
		DeviceClass: "gpu.example.com",
		Proof:       Proof{Command: &CommandProof{Args: []string{"nvidia-smi", "-L"}, Pattern: "GPU [0-9]+"}},
		Timeouts:    Timeouts{PodRunning: DefaultPodRunningTimeout, Prepare: DefaultPrepareTimeout},
		Sanity:      Sanity{Restartable: true},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("Parse = %+v\nwant %+v", m, want)
	}
	if m.Enabled(DRAPrioritizedList) {
		t.Error("a capability the manifest does not name is enabled")
	}

	// Written back, the defaults are explicit and parse to the same manifest.
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	written, err := yaml.JSONToYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"podRunning: 2m0s", "prepare: 30s", "restartable: true"} {
		if !strings.Contains(string(written), w) {
			t.Errorf("written manifest lacks %q:\n%s", w, written)
		}
	}
	again, err := Parse("written.yaml", written)
	if err != nil {
		t.Fatalf("written manifest does not parse: %v\n%s", err, written)
	}
	if !reflect.DeepEqual(again, m) {
		t.Errorf("round trip = %+v\nwant %+v", again, m)
	}
}

func TestParseErrorsNameFileAndField(t *testing.T) {
	// Each case replaces or adds lines of the minimal manifest.
	without := func(field string) string {
		var kept []string
		for _, l := range strings.SplitAfter(minimal, "\n") {
			if !strings.HasPrefix(l, field+":") {
				kept = append(kept, l)
			}
		}
		return strings.Join(kept, "")
	}
	withProof := func(proof string) string {
		return strings.Replace(minimal, "proof:\n  command: {args: [nvidia-smi, -L], pattern: \"GPU [0-9]+\"}\n", "proof:\n"+proof, 1)
	}
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"empty", "", []string{"empty"}},
		{"only comments", "# nothing yet\n", []string{"only comments"}},
		{"malformed yaml", minimal + "capabilities: [\n", []string{"yaml"}},
		{"unknown top-level field", minimal + "drivr: gpu.example.com\n", []string{`unknown field "drivr"`}},
		{"unknown nested field", minimal + "sanity: {restartable: true, reboot: true}\n", []string{`unknown field "sanity.reboot"`}},
		{"field in wrong case", minimal + "DeviceClass: x\n", []string{`unknown field "DeviceClass"`}},
		{"wrong type", minimal + "capabilities: {SharedClaims: yes please}\n", []string{"capabilities", "bool"}},
		{
			"misspelt capability", minimal + "capabilities:\n  DRAPriorityList: true\n",
			[]string{"driver.yaml: capabilities.DRAPriorityList: ", "unknown capability; did you mean DRAPrioritizedList? known: DRAPrioritizedList, DRAAdminAccess"},
		},
		{"capability without its prefix", minimal + "capabilities: {AdminAccess: true}\n", []string{"capabilities.AdminAccess", "did you mean DRAAdminAccess?"}},
		{"capability far from any", minimal + "capabilities: {Teleport: true}\n", []string{"capabilities.Teleport: ", "unknown capability; known: "}},
		{"bad apiVersion", strings.Replace(minimal, "conformance.dralab.dev/v1alpha1", "conformance.dralab.dev/v1", 1), []string{"apiVersion: Unsupported value", `"conformance.dralab.dev/v1"`, APIVersion}},
		{"bad kind", strings.Replace(minimal, "kind: DriverManifest", "kind: Driver", 1), []string{"kind: Unsupported value", `"Driver"`, Kind}},
		{"missing driver", without("driver"), []string{"driver: Required"}},
		{"driver without a dot", strings.Replace(minimal, "driver: gpu.example.com", "driver: gpu", 1), []string{"driver: Invalid value", "with a dot"}},
		{"driver not a DNS name", strings.Replace(minimal, "driver: gpu.example.com", "driver: GPU.Example.com", 1), []string{"driver: Invalid value", "lowercase"}},
		{"missing device class", without("deviceClass"), []string{"deviceClass: Required"}},
		{"no proof", strings.Split(minimal, "proof:")[0], []string{"proof: Required", "exactly one of env and command"}},
		{
			"env and command", withProof("  env: {name: GPU_DEVICE_0, pattern: \"^gpu-[0-9]+$\"}\n  command: {args: [ls], pattern: gpu}\n"),
			[]string{"driver.yaml: proof: Forbidden", "exactly one of env and command, not both"},
		},
		{"bad env regexp", withProof("  env: {name: GPU_DEVICE_0, pattern: \"^gpu-[0-9+$\"}\n"), []string{"proof.env.pattern: Invalid value", "missing closing ]"}},
		{"bad command regexp", withProof("  command: {args: [ls], pattern: \"(gpu\"}\n"), []string{"proof.command.pattern: Invalid value", "missing closing )"}},
		{"empty pattern", withProof("  env: {name: GPU_DEVICE_0}\n"), []string{"proof.env.pattern: Required"}},
		{"bad env name", withProof("  env: {name: 0GPU, pattern: gpu}\n"), []string{"proof.env.name: Invalid value", `"0GPU"`}},
		{"command without args", withProof("  command: {pattern: gpu}\n"), []string{"proof.command.args: Required"}},
		{"env without a name", withProof("  env: {pattern: gpu}\n"), []string{"proof.env.name: Required", "exactly one of name", "namePattern"}},
		{
			"env name and name pattern", withProof("  env: {name: GPU_DEVICE_0, namePattern: \"^GPU_DEVICE_[0-9]+$\", pattern: gpu}\n"),
			[]string{"proof.env: Forbidden", "exactly one of name and namePattern, not both"},
		},
		{"bad env name pattern", withProof("  env: {namePattern: \"^GPU_DEVICE_[0-9+$\", pattern: gpu}\n"), []string{"proof.env.namePattern: Invalid value", "missing closing ]"}},
		{"misspelt env name pattern", withProof("  env: {name_pattern: \"^GPU_DEVICE_[0-9]+$\", pattern: gpu}\n"), []string{`unknown field "proof.env.name_pattern"`}},
		{"prioritized list without classes", minimal + "capabilities: {DRAPrioritizedList: true}\n", []string{"prioritizedClasses: Required", "DRAPrioritizedList is enabled"}},
		{"prioritized list of one", minimal + "prioritizedClasses: [a.example.com]\n", []string{"prioritizedClasses: Too few"}},
		{"prioritized list of nine", minimal + "prioritizedClasses: [a, b, c, d, e, f, g, h, i]\n", []string{"prioritizedClasses: Too many"}},
		{"duplicate prioritized class", minimal + "prioritizedClasses: [a, b, a]\n", []string{"prioritizedClasses[2]: Duplicate", `"a"`}},
		{"opaque config without samples", minimal + "capabilities: {OpaqueConfig: true}\n", []string{"opaqueConfig: Required", "OpaqueConfig is enabled"}},
		{"opaque config not an object", minimal + "opaqueConfig: {valid: 3, invalid: {a: 1}}\n", []string{"opaqueConfig.valid: Required", "an object"}},
		{"extended resource without domain", minimal + "extendedResourceName: gpu\n", []string{"extendedResourceName: Invalid value", "prefixed with a domain"}},
		{"native resource name", minimal + "extendedResourceName: kubernetes.io/gpu\n", []string{"extendedResourceName: Invalid value", "reserved"}},
		{"partitions enabled without partitions", minimal + "capabilities: {DRAPartitionableDevices: true}\n", []string{"partitions: Required", "DRAPartitionableDevices is enabled"}},
		{"partitions without a class", minimal + "partitions: {selector: \"true\"}\n", []string{"partitions.deviceClass: Required"}},
		{"partitions with a bad class", minimal + "partitions: {deviceClass: MIG}\n", []string{"partitions.deviceClass: Invalid value", `"MIG"`}},
		{"partitions with a bad selector", minimal + "partitions: {deviceClass: mig.example.com, selector: \"device.attributes[\"}\n", []string{"partitions.selector: Invalid value"}},
		{"proof names nothing of the device", withProof("  env: {name: GPU_DEVICE_0, pattern: \"^gpu-[0-9]+$\"}\n  names: gpu-0\n"), []string{"proof.names: Invalid value", `"gpu-0"`, "{device}"}},
		{"proof names an unknown placeholder", withProof("  env: {name: GPU_DEVICE_0, pattern: \"^gpu-[0-9]+$\"}\n  names: \"{uuid}\"\n"), []string{"proof.names: Unsupported value", `"{uuid}"`, "{attribute:<name>}"}},
		{"proof names an empty attribute", withProof("  env: {name: GPU_DEVICE_0, pattern: \"^gpu-[0-9]+$\"}\n  names: \"{attribute:}\"\n"), []string{"proof.names: Unsupported value"}},
		{"partitions with a bad proof", minimal + "partitions: {deviceClass: mig.example.com, proof: {env: {name: GPU_DEVICE_0}}}\n", []string{"partitions.proof.env.pattern: Required"}},
		{"misspelt partitions field", minimal + "partitions: {deviceclass: mig.example.com}\n", []string{`unknown field "partitions.deviceclass"`}},
		{"shares enabled without shares", minimal + "capabilities: {DRAConsumableCapacity: true}\n", []string{"shares: Required", "DRAConsumableCapacity is enabled"}},
		{"shares without a request", minimal + "shares: {deviceClass: gpu.example.com}\n", []string{"shares.request: Required"}},
		{"shares with a zero request", minimal + "shares: {deviceClass: gpu.example.com, request: {memory: 0}}\n", []string{"shares.request[memory]: Invalid value", "must be positive"}},
		{"shares with a bad capacity name", minimal + "shares: {deviceClass: gpu.example.com, request: {\"Memory!\": 1Gi}}\n", []string{"shares.request[Memory!]: Invalid value"}},
		{"shares with a bad quantity", minimal + "shares: {deviceClass: gpu.example.com, request: {memory: lots}}\n", []string{"quantities must match"}},
		{"shares with a bad selector", minimal + "shares: {deviceClass: gpu.example.com, selector: \"1 +\", request: {memory: 1Gi}}\n", []string{"shares.selector: Invalid value"}},
		{"misspelt shares field", minimal + "shares: {deviceClass: gpu.example.com, requests: {memory: 1Gi}}\n", []string{`unknown field "shares.requests"`}},
		{"binding conditions enabled without a section", minimal + "capabilities: {DRADeviceBindingConditions: true}\n", []string{"bindingConditions: Required", "DRADeviceBindingConditions is enabled"}},
		{"binding conditions without a class", minimal + "bindingConditions: {selector: \"true\"}\n", []string{"bindingConditions.deviceClass: Required"}},
		{"binding conditions with a bad selector", minimal + "bindingConditions: {deviceClass: gpu.example.com, selector: \"1 +\"}\n", []string{"bindingConditions.selector: Invalid value"}},
		{"misspelt binding conditions field", minimal + "bindingConditions: {class: gpu.example.com}\n", []string{`unknown field "bindingConditions.class"`}},
		{"health enabled without commands", minimal + "capabilities: {ResourceHealthStatus: true}\n", []string{"health: Required", "ResourceHealthStatus is enabled"}},
		{"health without a heal command", minimal + "health: {fail: [fail, \"{device}\"]}\n", []string{"health.heal: Required"}},
		{"health command without the device", minimal + "health: {fail: [fail], heal: [heal, \"{device}\"]}\n", []string{"health.fail: Invalid value", "{device}"}},
		{"misspelt health field", minimal + "health: {break: [x]}\n", []string{`unknown field "health.break"`}},
		{"network data enabled without a section", minimal + "capabilities: {NetworkData: true}\n", []string{"networkData: Required", "NetworkData is enabled"}},
		{"network data without a pattern", withProof("  env: {name: NIC_0, pattern: \"^nic-[0-9]+$\"}\n") + "networkData: {interface: {env: {name: NIC_0_INTERFACE}}}\n", []string{"networkData.interface.env.pattern: Required"}},
		{"network data with names", withProof("  env: {name: NIC_0, pattern: \"^nic-[0-9]+$\"}\n") + "networkData: {interface: {env: {name: NIC_0_INTERFACE, pattern: x}, names: \"{device}\"}}\n", []string{"networkData.interface.names: Forbidden"}},
		{"network data by command", withProof("  env: {name: NIC_0, pattern: \"^nic-[0-9]+$\"}\n") + "networkData: {interface: {command: {args: [ip, link], pattern: x}}}\n", []string{"networkData.interface.command: Forbidden", "env"}},
		{"network data beside a command proof", minimal + "networkData: {interface: {env: {name: NIC_0_INTERFACE, pattern: x}}}\n", []string{"networkData.interface: Forbidden", "command proof"}},
		{"derived attributes without a topology", minimal + "capabilities: {DRADerivedAttributes: true}\n", []string{"topology: Required", "DRADerivedAttributes is enabled"}},
		{"topology without an expression", minimal + "topology: {}\n", []string{"topology.expression: Required"}},
		{"topology that does not compile", minimal + "topology: {expression: \"device.attributes[\"}\n", []string{"topology.expression: Invalid value"}},
		{"topology of a map", minimal + "topology: {expression: \"device.attributes\"}\n", []string{"topology.expression: Invalid value"}},
		{"list attributes without a name", minimal + "capabilities: {DRAListTypeAttributes: true}\n", []string{"listAttribute: Required", "DRAListTypeAttributes is enabled"}},
		{"list attribute with a bad name", minimal + "listAttribute: {name: \"resource.kubernetes.io/numa-node\"}\n", []string{"listAttribute.name: Invalid value", "C identifier"}},
		{"list attribute with a bad domain", minimal + "listAttribute: {name: \"Resource_Kubernetes/numaNode\"}\n", []string{"listAttribute.name: Invalid value"}},
		{"toleration of an unknown effect", minimal + "proofPod: {tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoPlace}]}\n", []string{"proofPod.tolerations[0].effect: Unsupported value", `"NoPlace"`}},
		{"toleration with a value and Exists", minimal + "proofPod: {tolerations: [{key: nvidia.com/gpu, operator: Exists, value: present}]}\n", []string{"proofPod.tolerations[0].value: Invalid value", "Exists takes no value"}},
		{"toleration of every key, with Equal", minimal + "proofPod: {tolerations: [{operator: Equal, value: x}]}\n", []string{"proofPod.tolerations[0].operator: Invalid value"}},
		{"node selector of a bad key", minimal + "proofPod: {nodeSelector: {\"bad key\": x}}\n", []string{"proofPod.nodeSelector: Invalid value", `"bad key"`}},
		{"runtime class of a bad name", minimal + "proofPod: {runtimeClassName: Nvidia_Runtime}\n", []string{"proofPod.runtimeClassName: Invalid value"}},
		{"unknown proof pod field", minimal + "proofPod: {serviceAccountName: x}\n", []string{`unknown field "proofPod.serviceAccountName"`}},
		{"bad duration", minimal + "timeouts: {podRunning: 2 minutes}\n", []string{"timeouts.podRunning: Invalid value", `"2 minutes"`, "Go duration"}},
		{"duration without unit", minimal + "timeouts: {prepare: \"30\"}\n", []string{"timeouts.prepare: Invalid value", `"30"`}},
		{"zero duration", minimal + "timeouts: {prepare: 0s}\n", []string{"timeouts.prepare: Invalid value", "must be positive"}},
		{"negative duration", minimal + "timeouts: {podRunning: -1m}\n", []string{"timeouts.podRunning: Invalid value", "must be positive"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("driver.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("no error for\n%s", c.yaml)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range append(c.want, "driver.yaml: ") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestPartitionsAndShares(t *testing.T) {
	m, err := Parse("driver.yaml", []byte(minimal+`capabilities: {DRAPartitionableDevices: true, DRAConsumableCapacity: true}
partitions:
  deviceClass: mig.example.com
  selector: device.attributes["gpu.example.com"].profile == "1g.10gb"
  proof: {env: {namePattern: "^GPU_DEVICE_[0-9]+$", pattern: "-mig-"}}
shares: {deviceClass: gpu.example.com, request: {memory: 7Gi}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Partitions{DeviceClass: "mig.example.com", Selector: `device.attributes["gpu.example.com"].profile == "1g.10gb"`,
		Proof: &Proof{Env: &EnvProof{NamePattern: "^GPU_DEVICE_[0-9]+$", Pattern: "-mig-"}}}
	if !reflect.DeepEqual(m.Partitions, want) {
		t.Errorf("partitions = %+v, want %+v", m.Partitions, want)
	}
	if q := m.Shares.Request["memory"]; m.Shares.DeviceClass != "gpu.example.com" || q.String() != "7Gi" || len(m.Shares.Request) != 1 {
		t.Errorf("shares = %+v, want class gpu.example.com and a request of memory: 7Gi", m.Shares)
	}
}

func TestBindingConditions(t *testing.T) {
	m, err := Parse("driver.yaml", []byte(minimal+`capabilities: {DRADeviceBindingConditions: true}
bindingConditions:
  deviceClass: h100.example.com
  selector: device.attributes["gpu.example.com"].index == 0
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &BindingConditions{DeviceClass: "h100.example.com", Selector: `device.attributes["gpu.example.com"].index == 0`}
	if !reflect.DeepEqual(m.BindingConditions, want) {
		t.Errorf("bindingConditions = %+v, want %+v", m.BindingConditions, want)
	}
}

func TestParseReportsEveryError(t *testing.T) {
	data := `apiVersion: conformance.dralab.dev/v1alpha1
kind: DriverManifest
deviceClass: gpu.example.com
capabilities: {DRAPrioritizedList: true, OpaqueConfg: true}
proof:
  env: {name: GPU_DEVICE_0, pattern: "("}
timeouts: {prepare: soon}
`
	_, err := Parse("driver.yaml", []byte(data))
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"driver: Required", "prioritizedClasses: Required", "capabilities.OpaqueConfg", "did you mean OpaqueConfig?", "proof.env.pattern", "timeouts.prepare"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestSuggest(t *testing.T) {
	known := make([]string, 0, len(knownCapabilities))
	for _, c := range Capabilities() {
		known = append(known, string(c))
	}
	for name, want := range map[string]string{
		"DRAPriorityList":           "DRAPrioritizedList",
		"draadminaccess":            "DRAAdminAccess",
		"DRADeviceTaint":            "DRADeviceTaints",
		"SharedClaim":               "SharedClaims",
		"ConsumableCapacity":        "DRAConsumableCapacity",
		"DRAResourceClaimStatus":    "DRAResourceClaimDeviceStatus",
		"GPU":                       "",
		"DynamicResourceAllocation": "",
	} {
		if got := nearest.Name(name, known); got != want {
			t.Errorf("nearest.Name(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestProofMatch(t *testing.T) {
	env := Proof{Env: &EnvProof{Name: "GPU_DEVICE_0", Pattern: "^gpu-[0-9]+$"}}
	if v, err := env.Match("PATH=/bin\nGPU_DEVICE_0=gpu-3\nGPU_DEVICE_0_UUID=x\n"); err != nil || v != "gpu-3" {
		t.Errorf("env proof = %q, %v; want gpu-3", v, err)
	}
	for out, want := range map[string]string{"PATH=/bin\n": "has no GPU_DEVICE_0", "GPU_DEVICE_0=cpu\n": `does not match`} {
		if _, err := env.Match(out); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("env proof of %q = %v, want an error containing %q", out, err, want)
		}
	}
	// A driver naming the variable after the device: gpu-3 sets
	// GPU_DEVICE_3, and a proof naming one variable would hold only while
	// that device is free.
	perDevice := Proof{Env: &EnvProof{NamePattern: "^GPU_DEVICE_[0-9]+$", Pattern: "^gpu-[0-9]+$"}}
	if v, err := perDevice.Match("PATH=/bin\nGPU_DEVICE_3_UUID=GPU-3\nGPU_DEVICE_3=gpu-3\n"); err != nil || v != "gpu-3" {
		t.Errorf("env proof by name pattern = %q, %v; want gpu-3", v, err)
	}
	for out, want := range map[string]string{
		"PATH=/bin\nGPU_DEVICE_3_UUID=GPU-3\n": `has no variable whose name matches "^GPU_DEVICE_[0-9]+$"`,
		"GPU_DEVICE_3=cpu\nGPU_DEVICE_4=\n":    `none has a value matching "^gpu-[0-9]+$": GPU_DEVICE_3="cpu", GPU_DEVICE_4=""`,
	} {
		if _, err := perDevice.Match(out); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("env proof by name pattern of %q = %v, want an error containing %q", out, err, want)
		}
	}
	cmd := Proof{Command: &CommandProof{Args: []string{"nvidia-smi", "-L"}, Pattern: `GPU 0: NVIDIA \S+`}}
	if v, err := cmd.Match("GPU 0: NVIDIA H100 (UUID: GPU-1)"); err != nil || v != "GPU 0: NVIDIA H100" {
		t.Errorf("command proof = %q, %v", v, err)
	}
	if _, err := cmd.Match("No devices were found"); err == nil {
		t.Error("command proof matched output without a GPU")
	}
}

// A name pattern is decoded strictly like the rest and written back as it
// was read.
func TestEnvNamePatternRoundTrips(t *testing.T) {
	data := strings.Replace(minimal, "command: {args: [nvidia-smi, -L], pattern: \"GPU [0-9]+\"}", "env: {namePattern: \"^GPU_DEVICE_[0-9]+$\", pattern: \"^gpu-[0-9]+$\"}", 1)
	m, err := Parse("driver.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := EnvProof{NamePattern: "^GPU_DEVICE_[0-9]+$", Pattern: "^gpu-[0-9]+$"}
	if m.Proof.Env == nil || *m.Proof.Env != want {
		t.Fatalf("proof.env = %+v, want %+v", m.Proof.Env, want)
	}
	written, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(written), `"name":`) {
		t.Errorf("written manifest has an empty name beside namePattern: %s", written)
	}
	again, err := Parse("written.yaml", written)
	if err != nil {
		t.Fatalf("written manifest does not parse: %v\n%s", err, written)
	}
	if !reflect.DeepEqual(again, m) {
		t.Errorf("round trip = %+v\nwant %+v", again, m)
	}
}

// The proof pods' template: every field set on a pod, tolerations added
// to a pod's own.
func TestProofPodApplies(t *testing.T) {
	m, err := Parse("driver.yaml", []byte(minimal+`proofPod:
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
  imagePullSecrets: [{name: registry}]
  runtimeClassName: nvidia
  priorityClassName: gpu-tests
`))
	if err != nil {
		t.Fatal(err)
	}
	spec := v1.PodSpec{Tolerations: []v1.Toleration{{Key: "own", Operator: v1.TolerationOpExists}}}
	m.ProofPod.Apply(&spec)
	want := v1.PodSpec{
		Tolerations:       []v1.Toleration{{Key: "own", Operator: v1.TolerationOpExists}, {Key: "nvidia.com/gpu", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}},
		NodeSelector:      map[string]string{"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
		ImagePullSecrets:  []v1.LocalObjectReference{{Name: "registry"}},
		RuntimeClassName:  ptr.To("nvidia"),
		PriorityClassName: "gpu-tests",
	}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("the pod (-want +got):\n%s", diff)
	}
}

// --toleration reads kubectl's taint syntax.
func TestParseToleration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want v1.Toleration
		err  string
	}{
		{in: "nvidia.com/gpu=present:NoSchedule", want: v1.Toleration{Key: "nvidia.com/gpu", Operator: v1.TolerationOpEqual, Value: "present", Effect: v1.TaintEffectNoSchedule}},
		{in: "nvidia.com/gpu:NoSchedule", want: v1.Toleration{Key: "nvidia.com/gpu", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}},
		{in: "sku=gpu", want: v1.Toleration{Key: "sku", Operator: v1.TolerationOpEqual, Value: "gpu"}},
		{in: "nvidia.com/gpu", want: v1.Toleration{Key: "nvidia.com/gpu", Operator: v1.TolerationOpExists}},
		{in: "nvidia.com/gpu=present:NoRun", err: `unsupported value: "NoRun"`},
		{in: "nvidia.com/gpu:", err: "an effect after the colon"},
		{in: "=x:NoSchedule", err: "a key"},
		{in: "bad key=x", err: "toleration.key"},
		{in: "k=bad value", err: "toleration.value"},
	} {
		got, err := ParseToleration(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.err))):
			t.Errorf("%q: got %+v, %v; want an error saying %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}
