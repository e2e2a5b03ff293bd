//go:build cgo

package nvmllib

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	dnvml "github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/drivers/nvml/internal/fakesysfs"
)

const node = "node-a"

// wantTopology is where the mock puts GPU i: the fake driver's layout.
var wantTopology = []struct {
	busID, root string
	numa        int
}{
	{"0000:16:00.0", "pci0000:15", 0}, {"0000:17:00.0", "pci0000:15", 0},
	{"0000:38:00.0", "pci0000:37", 0}, {"0000:39:00.0", "pci0000:37", 0},
	{"0000:97:00.0", "pci0000:96", 1}, {"0000:98:00.0", "pci0000:96", 1},
	{"0000:b9:00.0", "pci0000:b8", 1}, {"0000:ba:00.0", "pci0000:b8", 1},
}

// wantSystem is what each server's driver reports, normalised.
var wantSystem = map[string]struct{ driver, cuda string }{
	"dgxa100":     {"550.54.15", "12.4.0"},
	"dgxa100-mig": {"550.54.15", "12.4.0"},
	"dgxb200":     {"560.28.3", "12.6.0"},
	"dgxh100":     {"550.54.15", "12.4.0"},
	"dgxh200":     {"550.54.15", "12.4.0"},
	"mixed":       {"550.127.5", "12.4.0"},
}

var wantArchitecture = map[nvml.DeviceArchitecture]string{
	nvml.DEVICE_ARCH_AMPERE: "Ampere", nvml.DEVICE_ARCH_HOPPER: "Hopper", nvml.DEVICE_ARCH_BLACKWELL: "Blackwell",
	nvml.DEVICE_ARCH_ADA: "Ada Lovelace",
}

// TestMockServers checks every device of every mock server against the
// mock's own description of it, with the PCIe roots coming either from
// the mock's topology or, as on a real machine, from sysfs.
func TestMockServers(t *testing.T) {
	for _, name := range dnvml.MockServers {
		for _, topology := range []string{"mock", "sysfs"} {
			t.Run(name+"/"+topology, func(t *testing.T) {
				ref, err := newMockServer(name)
				if err != nil {
					t.Fatal(err)
				}
				inv := &dnvml.Inventory{SysfsRoot: t.TempDir()}
				if topology == "mock" {
					inv.Lister, err = Open(dnvml.MockPrefix+name, WithNode(node))
				} else {
					inv.Lister, err = sysfsOnly(t, name, inv.SysfsRoot)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = inv.Close() })
				devs, err := inv.Devices(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				// A GPU in MIG mode comes with its MIG devices (TestMIGEnumeration).
				devs = slices.DeleteFunc(devs, func(d kit.Device) bool { return *d.API.Attributes["type"].StringValue != "gpu" })
				if len(devs) != len(ref.Devices) {
					t.Fatalf("got %d devices, the mock has %d", len(devs), len(ref.Devices))
				}
				for i, dev := range devs {
					checkDevice(t, dev, ref.Devices[i].(*server.Device).Config, i, wantSystem[name].driver, wantSystem[name].cuda)
				}
			})
		}
	}
}

// sysfsOnly lists a patched mock server without its topology, with a
// sysfs under root that places the GPUs where the mock would.
func sysfsOnly(t *testing.T, name, root string) (dnvml.Lister, error) {
	s, err := newMockServer(name)
	if err != nil {
		return nil, err
	}
	if _, err := patchMock(s, node); err != nil {
		return nil, err
	}
	rootOf := map[string]string{}
	for _, w := range wantTopology {
		rootOf[w.busID] = w.root
	}
	if err := fakesysfs.Write(root, rootOf); err != nil {
		t.Fatal(err)
	}
	for _, w := range wantTopology {
		if err := fakesysfs.SetNUMANode(root, w.busID, w.numa); err != nil {
			t.Fatal(err)
		}
	}
	return open(s, nil)
}

func checkDevice(t *testing.T, dev kit.Device, cfg gpus.Config, i int, driver, cuda string) {
	t.Helper()
	name := fmt.Sprintf("gpu-%d", i)
	uuid := gpu.DeviceUUID(node, i)
	want := map[string]string{
		"type":                            "gpu",
		"index":                           fmt.Sprint(i),
		"minor":                           fmt.Sprint(i),
		"uuid":                            uuid,
		"productName":                     cfg.Name,
		"brand":                           "Nvidia",
		"architecture":                    wantArchitecture[cfg.Architecture],
		"cudaComputeCapability":           fmt.Sprintf("v%d.%d.0", cfg.CudaMajor, cfg.CudaMinor),
		"driverVersion":                   "v" + driver,
		"cudaDriverVersion":               "v" + cuda,
		"resource.kubernetes.io/pciBusID": wantTopology[i].busID,
		"resource.kubernetes.io/pcieRoot": wantTopology[i].root,
		"numa":                            fmt.Sprint(wantTopology[i].numa),
	}
	if len(dev.API.ConsumesCounters) > 0 {
		// In MIG mode, published with its MIG devices.
		want["partitioning"] = "mig"
	}
	if got := flatten(dev.API.Attributes); !reflect.DeepEqual(got, want) {
		t.Errorf("%s attributes:\n got %v\nwant %v", name, got, want)
	}
	if dev.API.Name != name {
		t.Errorf("device %d is named %q, want %q", i, dev.API.Name, name)
	}
	if mem, ok := dev.API.Capacity["memory"]; !ok || mem.Value.Value() != int64(cfg.MemoryMB)<<20 {
		t.Errorf("%s memory = %v, want %d MiB", name, dev.API.Capacity, cfg.MemoryMB)
	}
	if want := map[string]string{"": name, "PRODUCT": cfg.Name, "UUID": uuid}; !reflect.DeepEqual(dev.Env, want) {
		t.Errorf("%s env = %v, want %v", name, dev.Env, want)
	}
	if want := map[string]string{"NVIDIA_VISIBLE_DEVICES": uuid}; !reflect.DeepEqual(dev.ClaimEnv, want) {
		t.Errorf("%s claim env = %v, want %v", name, dev.ClaimEnv, want)
	}
	if len(dev.DeviceNodes) == 0 || dev.DeviceNodes[0].Path != fmt.Sprintf("/dev/nvidia%d", i) {
		t.Errorf("%s device nodes = %v", name, dev.DeviceNodes)
	}
}

// flatten writes each attribute as text, versions with a "v".
func flatten(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[string]string {
	out := map[string]string{}
	for n, a := range attrs {
		switch {
		case a.StringValue != nil:
			out[string(n)] = *a.StringValue
		case a.IntValue != nil:
			out[string(n)] = fmt.Sprint(*a.IntValue)
		case a.VersionValue != nil:
			out[string(n)] = "v" + *a.VersionValue
		case a.BoolValue != nil:
			out[string(n)] = fmt.Sprint(*a.BoolValue)
		}
	}
	return out
}

func TestMixedServer(t *testing.T) {
	s, err := newMockServer("mixed")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.(*server.Device).Config.Name)
	}
	want := []string{
		"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3",
		"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB",
		"NVIDIA L4", "NVIDIA L4", "NVIDIA L4", "NVIDIA L4",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("mixed server = %v, want %v", names, want)
	}
}

// A DGX mock node and a fake node of 8 H100s publish the same topology and
// UUIDs: a scenario's PCIe-root expectations hold on both.
func TestMockTopologyIsTheFakeDriver(t *testing.T) {
	profile, err := fakegpu.LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	fake, err := (&fakegpu.Inventory{Node: node, Profile: profile, Count: 8}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open("mock:dgxh100", WithNode(node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	mocked := listed(t, l)
	if len(mocked) != len(fake) {
		t.Fatalf("mock lists %d GPUs, fake %d", len(mocked), len(fake))
	}
	for i := range fake {
		for _, a := range []resourceapi.QualifiedName{"resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot", "uuid"} {
			f, m := fake[i].API.Attributes[a].StringValue, mocked[i].API.Attributes[a].StringValue
			if f == nil || m == nil || *f != *m {
				t.Errorf("GPU %d %s: mock %v, fake %v", i, a, ptrString(m), ptrString(f))
			}
		}
	}
}

func ptrString(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

func TestMockIsStableAcrossRestarts(t *testing.T) {
	list := func(node string) []kit.Device {
		t.Helper()
		l, err := Open("mock:mixed", WithNode(node))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return listed(t, l)
	}
	first, again, other := list(node), list(node), list("node-b")
	if !reflect.DeepEqual(first, again) {
		t.Error("a restarted mock lists different devices")
	}
	for i := range first {
		if *first[i].API.Attributes["uuid"].StringValue == *other[i].API.Attributes["uuid"].StringValue {
			t.Errorf("%s has the same UUID on two nodes", first[i].API.Name)
		}
	}
}

func TestLibraryNotFoundCallsNothingMore(t *testing.T) {
	// Any call but Init panics: moq's mock has no other function set.
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	l, err := open(lib, nil)
	if l != nil || err != ErrLibraryNotFound {
		t.Fatalf("open = %v, %v; want %v", l, err, ErrLibraryNotFound)
	}
	if got := err.Error(); got != "NVML library not found: is the NVIDIA driver installed?" {
		t.Errorf("message = %q", got)
	}
	if calls := callsBut(lib, "Init"); calls != 0 {
		t.Errorf("%d NVML calls after the failed Init", calls)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times", n)
	}
}

func TestInitFailureNamesTheCode(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	_, err := open(lib, nil)
	if !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) || errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("open = %v, want ERROR_DRIVER_NOT_LOADED", err)
	}
	want := "NVML Init: the NVIDIA kernel driver is not loaded (ERROR_DRIVER_NOT_LOADED, code 9)"
	if err == nil || err.Error() != want {
		t.Errorf("message = %v, want %q", err, want)
	}
	if calls := callsBut(lib, "Init"); calls != 0 {
		t.Errorf("%d NVML calls after the failed Init", calls)
	}
}

// callsBut counts the calls a moq mock recorded, but those of one method.
func callsBut(lib *mock.Interface, method string) int {
	calls := reflect.ValueOf(lib).Elem().FieldByName("calls")
	n := 0
	for i := range calls.NumField() {
		if calls.Type().Field(i).Name != method {
			n += calls.Field(i).Len()
		}
	}
	return n
}

// opened is lib initialized, and closed when the test ends.
func opened(t *testing.T, lib nvml.Interface) *lister {
	t.Helper()
	l, err := open(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// listed is l's devices over an empty sysfs.
func listed(t *testing.T, l dnvml.Lister) []kit.Device {
	t.Helper()
	devs, err := (&dnvml.Inventory{Lister: l, SysfsRoot: t.TempDir()}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// patched is a DGX H100 mock with stable UUIDs and bus IDs, whose device i
// a test may break.
func patched(t *testing.T) *server.Server {
	s := dgxh100.New()
	if _, err := patchMock(s, node); err != nil {
		t.Fatal(err)
	}
	return s
}

// A GPU lost at start is left out, whichever call says so, and the node's
// other GPUs are published; a node whose every GPU is lost fails, naming
// them. Before, one lost GPU failed the listing: the driver exited and
// restarted, and the healthy GPUs were never published.
func TestLostGPUIsLeftOut(t *testing.T) {
	for name, breakIt := range map[string]func(s *server.Server){
		"handle": func(s *server.Server) {
			s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 3 {
					return nil, nvml.ERROR_GPU_IS_LOST
				}
				return s.Devices[i], nvml.SUCCESS
			}
		},
		"uuid": func(s *server.Server) {
			s.Devices[3].(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
		},
		"memory": func(s *server.Server) {
			s.Devices[3].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := patched(t)
			breakIt(s)
			lostUUID, _ := s.Devices[3].(*server.Device).GetUUID()
			devs, err := (&dnvml.Inventory{Lister: opened(t, s)}).Devices(context.Background())
			if err != nil {
				t.Fatalf("Devices = %v, want the other GPUs", err)
			}
			if len(devs) != 7 {
				t.Errorf("%d devices published, want the 7 GPUs that are not lost", len(devs))
			}
			for _, d := range devs {
				if u := d.API.Attributes["uuid"].StringValue; name != "uuid" && u != nil && *u == lostUUID {
					t.Errorf("the lost GPU %s is published as %s", lostUUID, d.API.Name)
				}
			}
		})
	}
	s := patched(t)
	for _, d := range s.Devices {
		d.(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	}
	_, err := (&dnvml.Inventory{Lister: opened(t, s)}).Devices(context.Background())
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || !strings.Contains(err.Error(), "every GPU of the node is lost") || !strings.Contains(err.Error(), "GPU at index 7 is lost") {
		t.Errorf("Devices with every GPU lost = %v, want an error naming them", err)
	}
}

func TestMemoryNotSupportedLeavesOutCapacity(t *testing.T) {
	s := patched(t)
	s.Devices[2].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
	for i, d := range listed(t, opened(t, s)) {
		_, has := d.API.Capacity["memory"]
		if has != (i != 2) {
			t.Errorf("%s has memory: %v", d.API.Name, has)
		}
	}
}

func TestOtherDeviceErrorsNameTheCall(t *testing.T) {
	s := patched(t)
	s.Devices[1].(*server.Device).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	_, err := opened(t, s).GPUs(context.Background())
	want := "GPU at index 1: NVML GetName: unknown error (ERROR_UNKNOWN, code 999)"
	if err == nil || err.Error() != want {
		t.Errorf("GPUs = %v, want %q", err, want)
	}
}

func TestCloseShutsDownOnce(t *testing.T) {
	s := patched(t)
	l, err := open(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times", n)
	}
	if _, err := l.GPUs(context.Background()); err == nil {
		t.Error("a closed lister listed GPUs")
	}
}

func TestUnknownSources(t *testing.T) {
	for _, source := range []string{"cuda", "mock:dgx9000", "mock:"} {
		_, err := Open(source, WithNode(node))
		if !errors.Is(err, ErrUnknownSource) || !strings.Contains(err.Error(), "mock:mixed") || !strings.Contains(err.Error(), fmt.Sprintf("%q", source)) {
			t.Errorf("Open(%q) = %v, want an unknown-source error listing the sources", source, err)
		}
	}
	if _, err := Open("mock:dgxh100"); err == nil || !strings.Contains(err.Error(), "WithNode") {
		t.Errorf("Open(mock) without a node = %v, want an error asking for one", err)
	}
}

// TestMachineLibrary runs the real library: on a machine without the
// NVIDIA driver it must fail with ErrLibraryNotFound, not kill the test
// binary; on a GPU machine it lists the GPUs, which -v shows.
func TestMachineLibrary(t *testing.T) {
	l, err := Open(dnvml.SourceLibrary)
	if errors.Is(err, ErrLibraryNotFound) {
		t.Logf("no NVML here: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	devs, err := (&dnvml.Inventory{Lister: l}).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("%s: %v memory=%v nodes=%v claimEnv=%v", d.API.Name, flatten(d.API.Attributes), d.API.Capacity, d.DeviceNodes, d.ClaimEnv)
		for _, a := range []resourceapi.QualifiedName{"uuid", "productName", "architecture", "driverVersion", "resource.kubernetes.io/pciBusID"} {
			if _, ok := d.API.Attributes[a]; !ok {
				t.Errorf("%s has no %s", d.API.Name, a)
			}
		}
		if _, ok := d.API.Capacity["memory"]; !ok {
			t.Errorf("%s has no memory", d.API.Name)
		}
	}
}

// A library path that holds no NVML library is the library-not-found
// error, naming the path.
func TestLibraryPathNotFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	_, err := Open("", WithLibraryPath(path))
	if !errors.Is(err, ErrLibraryNotFound) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open with the library %s = %v, want ErrLibraryNotFound naming it", path, err)
	}
}
