//go:build cgo

package nvmllib

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// Open lists GPUs from a source: nvml.SourceLibrary (or "") for the machine's
// NVML library, nvml.MockPrefix+name for one of nvml.MockServers. It initializes
// NVML; the caller closes the Lister to shut it down.
func Open(source string, opts ...Option) (dnvml.Lister, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	src, err := dnvml.ParseSource(source)
	if err != nil {
		return nil, err
	}
	if src.Mock == "" {
		if o.library == "" {
			return open(nvml.New(), nil)
		}
		l, err := open(nvml.New(nvml.WithLibraryPath(o.library)), nil)
		if errors.Is(err, ErrLibraryNotFound) {
			return nil, fmt.Errorf("%s: %w", o.library, err)
		}
		return l, err
	}
	s, err := newMockServer(src.Mock)
	if err != nil {
		return nil, err
	}
	if o.node == "" {
		return nil, fmt.Errorf("GPU source %q: a mock server needs the node's name (WithNode) to derive stable UUIDs from", source)
	}
	roots, err := patchMock(s, o.node)
	if err != nil {
		return nil, fmt.Errorf("GPU source %q: %w", source, err)
	}
	events := &mockEvents{events: make(chan nvml.EventData, 16), lost: map[nvml.Device]bool{}}
	patchMockEvents(s, events)
	l, err := open(s, roots)
	if err != nil {
		return nil, err
	}
	l.mockEvents = events
	return l, nil
}

// lister lists GPUs through an nvml.Interface: the library or a mock.
// place is where a mock server's GPU sits: its PCIe root complex and NUMA
// node.
type place struct {
	pcieRoot string
	numaNode int
}

type lister struct {
	mu sync.Mutex
	// lib is nil once closed, so that Shutdown runs once and only after
	// a successful Init.
	lib nvml.Interface
	// places are the root complexes and NUMA nodes by bus ID as NVML
	// writes it; only mock servers, whose topology is invented, have them.
	places map[string]place
	// mockEvents are a mock source's injected Xid events and lost GPUs.
	mockEvents *mockEvents
}

// open initializes lib. It is Open's part that tests drive with a mock.
func open(lib nvml.Interface, places map[string]place) (*lister, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return &lister{lib: lib, places: places}, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, ErrLibraryNotFound
	default:
		return nil, &callError{call: "Init", ret: ret}
	}
}

// Close shuts NVML down.
func (l *lister) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		return nil
	}
	lib := l.lib
	l.lib = nil
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		return &callError{call: "Shutdown", ret: ret}
	}
	return nil
}

// GPUs implements dnvml.Lister. A GPU that NVML reports lost is left out,
// saying so at error level with its index (it needs a reset, or the node a
// reboot), so that the node's healthy GPUs are published and its prepared
// claims can still be unprepared; a node whose every GPU is lost fails the
// listing, which says why.
func (l *lister) GPUs(ctx context.Context) ([]dnvml.GPU, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		return nil, errors.New("NVML lister is closed")
	}
	logger := klog.FromContext(ctx)
	driverVersion, err := optional(logger, "SystemGetDriverVersion", l.lib.SystemGetDriverVersion)
	if err != nil {
		return nil, err
	}
	cudaVersion, err := optional(logger, "SystemGetCudaDriverVersion", l.lib.SystemGetCudaDriverVersion)
	if err != nil {
		return nil, err
	}
	count, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &callError{call: "DeviceGetCount", ret: ret}
	}
	gpus := make([]dnvml.GPU, 0, count)
	var lost []error
	for i := range count {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := l.gpu(klog.LoggerWithValues(logger, "index", i), i)
		if errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
			err = fmt.Errorf("GPU at index %d is lost; it needs a reset, or the node a reboot: %w", i, err)
			logger.Error(err, "Leaving out a lost GPU; the node's other GPUs are published", "index", i)
			lost = append(lost, err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("GPU at index %d: %w", i, err)
		}
		g.DriverVersion, g.CUDADriverVersion = driverVersion, cudaVersion
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 && len(lost) > 0 {
		return nil, fmt.Errorf("every GPU of the node is lost: %w", errors.Join(lost...))
	}
	return gpus, nil
}

func (l *lister) gpu(logger klog.Logger, index int) (dnvml.GPU, error) {
	g := dnvml.GPU{Index: index}
	d, ret := l.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return g, &callError{call: "DeviceGetHandleByIndex", ret: ret}
	}
	var err error
	// Without a minor number the GPU has no name, without a UUID no
	// NVIDIA_VISIBLE_DEVICES: those two are required.
	if g.Minor, err = required("GetMinorNumber", d.GetMinorNumber); err != nil {
		return g, err
	}
	if g.UUID, err = required("GetUUID", d.GetUUID); err != nil {
		return g, err
	}
	if g.ProductName, err = optional(logger, "GetName", d.GetName); err != nil {
		return g, err
	}
	brand, err := optional(logger, "GetBrand", d.GetBrand)
	if err != nil {
		return g, err
	}
	g.Brand = brandNames[brand]
	arch, err := optional(logger, "GetArchitecture", d.GetArchitecture)
	if err != nil {
		return g, err
	}
	g.Architecture = architectureNames[arch]
	if g.Brand == "" || g.Architecture == "" {
		logger.V(1).Info("Leaving out a brand or architecture this package has no name for", "brand", int(brand), "architecture", int(arch))
	}
	mem, err := optional(logger, "GetMemoryInfo", d.GetMemoryInfo)
	if err != nil {
		return g, err
	}
	g.MemoryBytes = mem.Total
	if g.ComputeCapability, err = optional(logger, "GetCudaComputeCapability", func() ([2]int, nvml.Return) {
		major, minor, ret := d.GetCudaComputeCapability()
		return [2]int{major, minor}, ret
	}); err != nil {
		return g, err
	}
	pci, err := optional(logger, "GetPciInfo", d.GetPciInfo)
	if err != nil {
		return g, err
	}
	g.PCIBusID = cString(pci.BusId[:])
	if g.PCIBusID == "" {
		g.PCIBusID = cString(pci.BusIdLegacy[:])
	}
	if p, ok := l.places[g.PCIBusID]; ok {
		g.PCIeRoot, g.NUMANode = p.pcieRoot, ptr.To(p.numaNode)
	}
	mig, err := migEnabled(d)
	if err != nil {
		return g, err
	}
	if g.MIGMode = mig; mig {
		if g.MIG, g.Multiprocessors, err = migGeometry(logger, d); err != nil {
			return g, err
		}
	}
	return g, nil
}

// required is what an NVML call reports; any failure is an error.
func required[T any](call string, get func() (T, nvml.Return)) (T, error) {
	v, ret := get()
	if ret != nvml.SUCCESS {
		var zero T
		return zero, &callError{call: call, ret: ret}
	}
	return v, nil
}

// optional is what an NVML call reports, or the zero value where the GPU
// does not support the call: the attribute is then left out.
func optional[T any](logger klog.Logger, call string, get func() (T, nvml.Return)) (T, error) {
	v, ret := get()
	switch ret {
	case nvml.SUCCESS:
		return v, nil
	case nvml.ERROR_NOT_SUPPORTED:
		logger.V(1).Info("NVML does not support a call; leaving out what it reports", "call", call)
		var zero T
		return zero, nil
	default:
		var zero T
		return zero, &callError{call: call, ret: ret}
	}
}

// cString is a NUL-terminated C string from one of NVML's char arrays.
func cString(chars []int8) string {
	var b strings.Builder
	for _, c := range chars {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// callError is a failed NVML call. errors.Is matches it against the
// nvml.Return it carries.
type callError struct {
	call string
	ret  nvml.Return
}

func (e *callError) Error() string {
	name, text := returnText(e.ret)
	return fmt.Sprintf("NVML %s: %s (%s, code %d)", e.call, text, name, int32(e.ret))
}

func (e *callError) Is(target error) bool {
	ret, ok := target.(nvml.Return)
	return ok && ret == e.ret
}

// returnText names an NVML return code and says what it means, without
// NVML's ErrorString, which kills a process whose Init failed.
func returnText(ret nvml.Return) (name, text string) {
	if t, ok := returnTexts[ret]; ok {
		return t[0], t[1]
	}
	return "unknown code", "an error this package does not know"
}

var returnTexts = map[nvml.Return][2]string{
	nvml.SUCCESS:                         {"SUCCESS", "success"},
	nvml.ERROR_UNINITIALIZED:             {"ERROR_UNINITIALIZED", "NVML is not initialized"},
	nvml.ERROR_INVALID_ARGUMENT:          {"ERROR_INVALID_ARGUMENT", "invalid argument"},
	nvml.ERROR_NOT_SUPPORTED:             {"ERROR_NOT_SUPPORTED", "the GPU does not support this"},
	nvml.ERROR_NO_PERMISSION:             {"ERROR_NO_PERMISSION", "permission denied"},
	nvml.ERROR_ALREADY_INITIALIZED:       {"ERROR_ALREADY_INITIALIZED", "NVML is already initialized"},
	nvml.ERROR_NOT_FOUND:                 {"ERROR_NOT_FOUND", "not found"},
	nvml.ERROR_INSUFFICIENT_SIZE:         {"ERROR_INSUFFICIENT_SIZE", "a buffer is too small"},
	nvml.ERROR_INSUFFICIENT_POWER:        {"ERROR_INSUFFICIENT_POWER", "a GPU's external power cables are not attached properly"},
	nvml.ERROR_DRIVER_NOT_LOADED:         {"ERROR_DRIVER_NOT_LOADED", "the NVIDIA kernel driver is not loaded"},
	nvml.ERROR_TIMEOUT:                   {"ERROR_TIMEOUT", "timed out"},
	nvml.ERROR_IRQ_ISSUE:                 {"ERROR_IRQ_ISSUE", "the kernel driver found an interrupt problem with a GPU"},
	nvml.ERROR_LIBRARY_NOT_FOUND:         {"ERROR_LIBRARY_NOT_FOUND", "the NVML library was not found"},
	nvml.ERROR_FUNCTION_NOT_FOUND:        {"ERROR_FUNCTION_NOT_FOUND", "this NVML library is too old for the call"},
	nvml.ERROR_CORRUPTED_INFOROM:         {"ERROR_CORRUPTED_INFOROM", "a GPU's infoROM is corrupted"},
	nvml.ERROR_GPU_IS_LOST:               {"ERROR_GPU_IS_LOST", "the GPU has fallen off the bus or is otherwise inaccessible"},
	nvml.ERROR_RESET_REQUIRED:            {"ERROR_RESET_REQUIRED", "the GPU needs a reset"},
	nvml.ERROR_OPERATING_SYSTEM:          {"ERROR_OPERATING_SYSTEM", "the operating system refused the call"},
	nvml.ERROR_LIB_RM_VERSION_MISMATCH:   {"ERROR_LIB_RM_VERSION_MISMATCH", "the NVML library and the kernel driver are of different versions"},
	nvml.ERROR_IN_USE:                    {"ERROR_IN_USE", "the GPU is in use"},
	nvml.ERROR_MEMORY:                    {"ERROR_MEMORY", "out of memory"},
	nvml.ERROR_NO_DATA:                   {"ERROR_NO_DATA", "no data"},
	nvml.ERROR_VGPU_ECC_NOT_SUPPORTED:    {"ERROR_VGPU_ECC_NOT_SUPPORTED", "ECC is not supported with vGPU"},
	nvml.ERROR_INSUFFICIENT_RESOURCES:    {"ERROR_INSUFFICIENT_RESOURCES", "insufficient resources"},
	nvml.ERROR_FREQ_NOT_SUPPORTED:        {"ERROR_FREQ_NOT_SUPPORTED", "the frequency is not supported"},
	nvml.ERROR_ARGUMENT_VERSION_MISMATCH: {"ERROR_ARGUMENT_VERSION_MISMATCH", "the argument's version is not the library's"},
	nvml.ERROR_DEPRECATED:                {"ERROR_DEPRECATED", "the call is deprecated"},
	nvml.ERROR_NOT_READY:                 {"ERROR_NOT_READY", "the system is not ready"},
	nvml.ERROR_GPU_NOT_FOUND:             {"ERROR_GPU_NOT_FOUND", "the GPU was not found"},
	nvml.ERROR_INVALID_STATE:             {"ERROR_INVALID_STATE", "invalid state"},
	nvml.ERROR_RESET_TYPE_NOT_SUPPORTED:  {"ERROR_RESET_TYPE_NOT_SUPPORTED", "the reset type is not supported"},
	nvml.ERROR_UNKNOWN:                   {"ERROR_UNKNOWN", "unknown error"},
}

// brandNames and architectureNames are NVIDIA's names, as its DRA driver
// publishes them; a value missing here leaves the attribute out.
var brandNames = map[nvml.BrandType]string{
	nvml.BRAND_QUADRO:              "Quadro",
	nvml.BRAND_TESLA:               "Tesla",
	nvml.BRAND_NVS:                 "NVS",
	nvml.BRAND_GRID:                "Grid",
	nvml.BRAND_GEFORCE:             "GeForce",
	nvml.BRAND_TITAN:               "Titan",
	nvml.BRAND_NVIDIA_VAPPS:        "NvidiaVApps",
	nvml.BRAND_NVIDIA_VPC:          "NvidiaVPC",
	nvml.BRAND_NVIDIA_VCS:          "NvidiaVCS",
	nvml.BRAND_NVIDIA_VWS:          "NvidiaVWS",
	nvml.BRAND_NVIDIA_CLOUD_GAMING: "NvidiaCloudGaming",
	nvml.BRAND_QUADRO_RTX:          "QuadroRTX",
	nvml.BRAND_NVIDIA_RTX:          "NvidiaRTX",
	nvml.BRAND_NVIDIA:              "Nvidia",
	nvml.BRAND_GEFORCE_RTX:         "GeForceRTX",
	nvml.BRAND_TITAN_RTX:           "TitanRTX",
}

var architectureNames = map[nvml.DeviceArchitecture]string{
	nvml.DEVICE_ARCH_KEPLER:    "Kepler",
	nvml.DEVICE_ARCH_MAXWELL:   "Maxwell",
	nvml.DEVICE_ARCH_PASCAL:    "Pascal",
	nvml.DEVICE_ARCH_VOLTA:     "Volta",
	nvml.DEVICE_ARCH_TURING:    "Turing",
	nvml.DEVICE_ARCH_AMPERE:    "Ampere",
	nvml.DEVICE_ARCH_ADA:       "Ada Lovelace",
	nvml.DEVICE_ARCH_HOPPER:    "Hopper",
	nvml.DEVICE_ARCH_BLACKWELL: "Blackwell",
	nvml.DEVICE_ARCH_RUBIN:     "Rubin",
}
