package nvml

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/nvml/internal/fakesysfs"
)

// listerFunc is a Lister over a fixed answer.
type listerFunc func(context.Context) ([]GPU, error)

func (f listerFunc) GPUs(ctx context.Context) ([]GPU, error) { return f(ctx) }
func (f listerFunc) Close() error                            { return nil }

func fixed(gpus ...GPU) Lister {
	return listerFunc(func(context.Context) ([]GPU, error) { return gpus, nil })
}

// h100 is a GPU as NVML reports it on a DGX H100.
func h100(index, minor int, busID string) GPU {
	return GPU{
		Index: index, Minor: minor, UUID: "GPU-" + busID,
		ProductName: "NVIDIA H100 80GB HBM3", Brand: "Nvidia", Architecture: "Hopper",
		MemoryBytes: 81559 << 20, ComputeCapability: [2]int{9, 0},
		DriverVersion: "535.104.05", CUDADriverVersion: 12040, PCIBusID: busID,
	}
}

func TestAttributesMatchTheFakeDriver(t *testing.T) {
	sysfs := t.TempDir()
	if err := fakesysfs.Write(sysfs, map[string]string{"0000:3b:00.0": "pci0000:3a"}); err != nil {
		t.Fatal(err)
	}
	inv := &Inventory{Lister: fixed(h100(0, 0, "00000000:3B:00.0")), SysfsRoot: sysfs}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("got %d devices, want 1", len(devs))
	}
	got := devs[0]
	want := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                            {StringValue: ptr.To("gpu")},
		"index":                           {IntValue: ptr.To(int64(0))},
		"minor":                           {IntValue: ptr.To(int64(0))},
		"uuid":                            {StringValue: ptr.To("GPU-00000000:3B:00.0")},
		"productName":                     {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
		"brand":                           {StringValue: ptr.To("Nvidia")},
		"architecture":                    {StringValue: ptr.To("Hopper")},
		"cudaComputeCapability":           {VersionValue: ptr.To("9.0.0")},
		"driverVersion":                   {VersionValue: ptr.To("535.104.5")},
		"cudaDriverVersion":               {VersionValue: ptr.To("12.4.0")},
		"resource.kubernetes.io/pciBusID": {StringValue: ptr.To("0000:3b:00.0")},
		"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:3a")},
	}
	if !reflect.DeepEqual(got.API.Attributes, want) {
		t.Errorf("attributes:\n got %s\nwant %s", render(got.API.Attributes), render(want))
	}
	if mem := got.API.Capacity["memory"].Value; mem.Cmp(resource.MustParse("81559Mi")) != 0 {
		t.Errorf("memory = %s, want 81559Mi", mem.String())
	}
	if got.API.Name != "gpu-0" {
		t.Errorf("name = %q", got.API.Name)
	}
	if want := map[string]string{"": "gpu-0", "PRODUCT": "NVIDIA H100 80GB HBM3", "UUID": "GPU-00000000:3B:00.0"}; !reflect.DeepEqual(got.Env, want) {
		t.Errorf("env = %v, want %v", got.Env, want)
	}
	if want := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-00000000:3B:00.0"}; !reflect.DeepEqual(got.ClaimEnv, want) {
		t.Errorf("claim env = %v, want %v", got.ClaimEnv, want)
	}
	if want := []kit.DeviceNode{{Path: "/dev/nvidia0"}}; !reflect.DeepEqual(got.DeviceNodes, want) {
		t.Errorf("device nodes = %v, want %v", got.DeviceNodes, want)
	}
	wantEdits := kit.ContainerEdits{DeviceNodes: []kit.DeviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidia-uvm-tools"}}}
	if edits := inv.NodeEdits(); !reflect.DeepEqual(edits, wantEdits) {
		t.Errorf("node edits = %+v, want %+v", edits, wantEdits)
	}
}

// TestSameVocabularyAsFake keeps the two drivers' attributes from drifting
// apart: every name the fake driver publishes, with its value type.
func TestSameVocabularyAsFake(t *testing.T) {
	profile, err := fakegpu.LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	fake, err := (&fakegpu.Inventory{Node: "n", Profile: profile, Count: 1}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sysfs := t.TempDir()
	if err := fakesysfs.Write(sysfs, map[string]string{"0000:3b:00.0": "pci0000:3a"}); err != nil {
		t.Fatal(err)
	}
	if err := fakesysfs.SetNUMANode(sysfs, "0000:3b:00.0", 0); err != nil {
		t.Fatal(err)
	}
	ours, err := (&Inventory{Lister: fixed(h100(0, 0, "00000000:3B:00.0")), SysfsRoot: sysfs}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := typesOf(ours[0].API), typesOf(fake[0].API); !reflect.DeepEqual(got, want) {
		t.Errorf("attribute types:\n got %v\nwant %v (fake driver)", got, want)
	}
	for key := range fake[0].Env {
		if _, ok := ours[0].Env[key]; !ok {
			t.Errorf("no env key %q, which the fake driver sets", key)
		}
	}
}

func typesOf(d resourceapi.Device) map[string]string {
	out := map[string]string{}
	for name, a := range d.Attributes {
		switch {
		case a.StringValue != nil:
			out[string(name)] = "string"
		case a.IntValue != nil:
			out[string(name)] = "int"
		case a.VersionValue != nil:
			out[string(name)] = "version"
		case a.BoolValue != nil:
			out[string(name)] = "bool"
		}
	}
	for name := range d.Capacity {
		out[string(name)] = "capacity"
	}
	return out
}

func TestNamedAndSortedByMinorNotIndex(t *testing.T) {
	// NVML numbers GPUs in PCI order; the driver numbers device files in
	// probe order. Only the minor number survives a GPU falling off the bus.
	inv := &Inventory{Lister: fixed(
		h100(0, 3, "00000000:1B:00.0"),
		h100(1, 10, "00000000:43:00.0"),
		h100(2, 0, "00000000:52:00.0"),
		h100(3, 2, "00000000:61:00.0"),
	), SysfsRoot: t.TempDir()}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.API.Name+"@"+*d.API.Attributes["resource.kubernetes.io/pciBusID"].StringValue)
	}
	want := []string{"gpu-0@0000:52:00.0", "gpu-2@0000:61:00.0", "gpu-3@0000:1b:00.0", "gpu-10@0000:43:00.0"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("devices = %v, want %v", names, want)
	}
	if got := devs[3].DeviceNodes[0].Path; got != "/dev/nvidia10" {
		t.Errorf("gpu-10's device file = %s", got)
	}
}

func TestDuplicateMinorIsAnError(t *testing.T) {
	inv := &Inventory{Lister: fixed(h100(0, 1, "00000000:1B:00.0"), h100(1, 1, "00000000:43:00.0"))}
	_, err := inv.Devices(context.Background())
	if err == nil || !strings.Contains(err.Error(), "same minor number 1") {
		t.Errorf("Devices = %v, want an error about minor number 1", err)
	}
}

func TestListerErrorIsWrapped(t *testing.T) {
	cause := errors.New("GPU at index 3 is lost")
	inv := &Inventory{Lister: listerFunc(func(context.Context) ([]GPU, error) { return nil, cause })}
	_, err := inv.Devices(context.Background())
	if !errors.Is(err, cause) || !strings.HasPrefix(err.Error(), "listing GPUs: ") {
		t.Errorf("Devices = %v, want %v wrapped with context", err, cause)
	}
}

func TestUnreportedValuesAreLeftOut(t *testing.T) {
	g := GPU{Index: 0, Minor: 4} // NVML reported nothing else
	inv := &Inventory{Lister: fixed(g), SysfsRoot: t.TempDir(), OmitDeviceNodes: true}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	var names []string
	for n := range d.API.Attributes {
		names = append(names, string(n))
	}
	if len(names) != 3 || d.API.Attributes["type"].StringValue == nil || d.API.Attributes["minor"].IntValue == nil || d.API.Attributes["index"].IntValue == nil {
		t.Errorf("attributes = %v, want only type, index and minor", names)
	}
	if d.API.Capacity != nil {
		t.Errorf("capacity = %v, want none: memory was not reported", d.API.Capacity)
	}
	if d.ClaimEnv != nil || d.DeviceNodes != nil {
		t.Errorf("claim env %v, device nodes %v: want none", d.ClaimEnv, d.DeviceNodes)
	}
	if edits := inv.NodeEdits(); edits.Env != nil || edits.DeviceNodes != nil {
		t.Errorf("node edits %+v: want none without device files", edits)
	}
}

func TestMalformedValuesAreLeftOut(t *testing.T) {
	g := h100(0, 0, "3B:00.0")
	g.DriverVersion = "560.28.03-beta.1.2"
	devs, err := (&Inventory{Lister: fixed(g), SysfsRoot: t.TempDir()}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []resourceapi.QualifiedName{"driverVersion", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot"} {
		if a, ok := devs[0].API.Attributes[name]; ok {
			t.Errorf("%s = %s, want it left out", name, render(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{name: a}))
		}
	}
	if devs[0].API.Attributes["productName"].StringValue == nil {
		t.Error("a malformed value took the others with it")
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"00000001:DB:1F.7": "0001:db:1f.7",
		"0:5:0.1":          "0000:05:00.1",
	} {
		if got, err := normalizeBusID(in); err != nil || got != want {
			t.Errorf("normalizeBusID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "3B:00.0", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8", "0000:1ff:00.0", "00010000:3b:00.0", "0000:xx:00.0"} {
		if got, err := normalizeBusID(in); err == nil {
			t.Errorf("normalizeBusID(%q) = %q, want an error", in, got)
		}
	}
}

func TestPCIeRootFromSysfs(t *testing.T) {
	sysfs := t.TempDir()
	if err := fakesysfs.Write(sysfs, map[string]string{"0000:3b:00.0": "pci0000:3a", "0001:b8:00.0": "pci0001:b7"}); err != nil {
		t.Fatal(err)
	}
	// A link as the kernel writes it, through more than one bridge.
	deep := filepath.Join("devices", "pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0")
	if err := os.MkdirAll(filepath.Join(sysfs, deep), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", deep), filepath.Join(sysfs, "bus", "pci", "devices", "0000:02:00.0")); err != nil {
		t.Fatal(err)
	}
	for busID, want := range map[string]string{"0000:3b:00.0": "pci0000:3a", "0001:b8:00.0": "pci0001:b7", "0000:02:00.0": "pci0000:00"} {
		if got, err := sysfsPCIeRoot(sysfs, busID); err != nil || got != want {
			t.Errorf("sysfsPCIeRoot(%s) = %q, %v; want %q", busID, got, err, want)
		}
	}
	if got, err := sysfsPCIeRoot(sysfs, "0000:99:00.0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sysfsPCIeRoot(absent) = %q, %v; want a not-exist error", got, err)
	}
}

// A GPU's NUMA node comes from its numa_node file, under the driver's own
// attribute name; a GPU without NUMA affinity (-1) or without the file has
// none, rather than a value that would match every other such device; a
// mock backend's node wins over sysfs.
func TestNUMANodeFromSysfs(t *testing.T) {
	sysfs := t.TempDir()
	buses := map[string]string{"0000:3b:00.0": "pci0000:3a", "0000:bb:00.0": "pci0000:ba", "0000:cb:00.0": "pci0000:ca", "0000:db:00.0": "pci0000:da"}
	if err := fakesysfs.Write(sysfs, buses); err != nil {
		t.Fatal(err)
	}
	for busID, node := range map[string]int{"0000:3b:00.0": 0, "0000:bb:00.0": 1, "0000:cb:00.0": -1, "0000:db:00.0": 1} {
		if err := fakesysfs.SetNUMANode(sysfs, busID, node); err != nil {
			t.Fatal(err)
		}
	}
	mock := h100(4, 4, "00000000:DB:00.0")
	mock.NUMANode = ptr.To(0)
	devs, err := (&Inventory{Lister: fixed(h100(0, 0, "00000000:3B:00.0"), h100(1, 1, "00000000:BB:00.0"), h100(2, 2, "00000000:CB:00.0"), h100(3, 3, "00000000:EB:00.0"), mock), SysfsRoot: sysfs}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gpu-0": "0", "gpu-1": "1", "gpu-2": "none", "gpu-3": "none", "gpu-4": "0"}
	for _, d := range devs {
		got := "none"
		if a, ok := d.API.Attributes[gpu.AttrNUMA]; ok {
			got = fmt.Sprint(*a.IntValue)
		}
		if got != want[d.API.Name] {
			t.Errorf("%s: numa %s, want %s", d.API.Name, got, want[d.API.Name])
		}
	}
}

func TestPCIeRootFromTheBackendWins(t *testing.T) {
	// A mock's bus IDs are invented: the host's sysfs may hold another
	// device under the same address.
	sysfs := t.TempDir()
	if err := fakesysfs.Write(sysfs, map[string]string{"0000:3b:00.0": "pci0000:00"}); err != nil {
		t.Fatal(err)
	}
	g := h100(0, 0, "00000000:3B:00.0")
	g.PCIeRoot = "pci0000:3a"
	devs, err := (&Inventory{Lister: fixed(g), SysfsRoot: sysfs}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := *devs[0].API.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; got != "pci0000:3a" {
		t.Errorf("pcieRoot = %s, want the backend's pci0000:3a", got)
	}
}

func TestNoSysfsEntryLeavesOutPCIeRoot(t *testing.T) {
	devs, err := (&Inventory{Lister: fixed(h100(0, 0, "00000000:3B:00.0")), SysfsRoot: filepath.Join(t.TempDir(), "absent")}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	attrs := devs[0].API.Attributes
	if _, ok := attrs["resource.kubernetes.io/pcieRoot"]; ok {
		t.Error("pcieRoot published without a sysfs entry")
	}
	if attrs["resource.kubernetes.io/pciBusID"].StringValue == nil {
		t.Error("pciBusID left out with pcieRoot")
	}
}

func TestVersions(t *testing.T) {
	for in, want := range map[int]string{12040: "12.4", 11080: "11.8", 13000: "13.0", 12090: "12.9"} {
		if got := cudaVersion(in); got != want {
			t.Errorf("cudaVersion(%d) = %s, want %s", in, got, want)
		}
	}
	g := h100(0, 0, "00000000:3B:00.0")
	g.DriverVersion, g.CUDADriverVersion, g.ComputeCapability = "550.127.05", 12090, [2]int{10, 0}
	devs, err := (&Inventory{Lister: fixed(g), SysfsRoot: t.TempDir()}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[resourceapi.QualifiedName]string{"driverVersion": "550.127.5", "cudaDriverVersion": "12.9.0", "cudaComputeCapability": "10.0.0"} {
		if got := devs[0].API.Attributes[name].VersionValue; got == nil || *got != want {
			t.Errorf("%s = %v, want %s", name, got, want)
		}
	}
}

func TestNoLister(t *testing.T) {
	if _, err := (&Inventory{}).Devices(context.Background()); err == nil {
		t.Error("Devices without a lister succeeded")
	}
}

func render(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		a := attrs[name]
		b.WriteString(string(name) + "=")
		switch {
		case a.StringValue != nil:
			b.WriteString(*a.StringValue)
		case a.IntValue != nil:
			b.WriteString(strconv.FormatInt(*a.IntValue, 10))
		case a.VersionValue != nil:
			b.WriteString("v" + *a.VersionValue)
		}
		b.WriteString(" ")
	}
	return b.String()
}

// A GPU in MIG mode whose NVML lists no GPU instance profile is left out:
// whole, it would run no CUDA work. Before, it was published whole
// without a word.
func TestMIGModeWithoutProfilesIsLeftOut(t *testing.T) {
	empty := h100(1, 1, "00000000:43:00.0")
	empty.MIGMode = true
	devs, err := (&Inventory{Lister: fixed(h100(0, 0, "00000000:1B:00.0"), empty)}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].API.Name != DeviceName(0) {
		var names []string
		for _, d := range devs {
			names = append(names, d.API.Name)
		}
		t.Errorf("published %v, want only %s: the MIG-mode GPU without profiles left out", names, DeviceName(0))
	}
}
