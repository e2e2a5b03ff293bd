//go:build cgo

package nvmllib

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/dralab/dralab/drivers/gpu"
	dnvml "github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/drivers/pcilayout"
)

func newMockServer(name string) (*server.Server, error) {
	switch name {
	case "dgxa100":
		return dgxa100.New(), nil
	case "dgxa100-mig":
		s := dgxa100.New()
		for _, d := range s.Devices {
			if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
				return nil, fmt.Errorf("enabling MIG mode on a mock GPU: %w", &callError{call: "SetMigMode", ret: ret})
			}
		}
		return s, nil
	case "dgxb200":
		return dgxb200.New(), nil
	case "dgxh100":
		return dgxh100.New(), nil
	case "dgxh200":
		return dgxh200.New(), nil
	case "mixed":
		return mixedServer()
	}
	// ParseSource accepts only MockServers, each a case above.
	return nil, fmt.Errorf("%w %q: a mock server without a case in newMockServer", dnvml.ErrUnknownSource, dnvml.MockPrefix+name)
}

// mixedServer is a server of one model per allocation tier the lab's
// classes know: 2 H100 SXM5 80GB, 2 A100 SXM4 80GB and 4 L4 24GB, the
// default lab's fake mix. go-nvml's catalogue has no L4: l4PCIe24GB
// describes it. Its driver version has a leading zero ("05"), as real ones
// often do, so that the mock exercises the version normalisation.
func mixedServer() (*server.Server, error) {
	return server.New(
		server.WithGPUs(slices.Concat(
			gpus.Multiple(2, gpus.H100_SXM5_80GB),
			gpus.Multiple(2, gpus.A100_SXM4_80GB),
			gpus.Multiple(4, l4PCIe24GB),
		)...),
		server.WithDriverVersion("550.127.05"),
		server.WithNVMLVersion("12.550.127.05"),
		server.WithCUDADriverVersion(12040),
	)
}

// patchMock fills the gaps of go-nvml's mock devices, which get random
// UUIDs and no PCI bus IDs: the lab restarts drivers on hollow nodes, and
// a GPU must keep its UUID across restarts and differ from the next
// node's. It returns where each bus ID sits: root complex and NUMA node.
func patchMock(s *server.Server, node string) (map[string]place, error) {
	roots := make(map[string]place, len(s.Devices))
	for i, dev := range s.Devices {
		d, ok := dev.(*server.Device)
		if !ok {
			return nil, fmt.Errorf("mock device %d is a %T, not a *server.Device", i, dev)
		}
		slot := pcilayout.GPU(i)
		domain, bus := slot.Domain, slot.Bus
		busID := fmt.Sprintf("%08X:%02X:00.0", domain, bus)
		info := nvml.PciInfo{Domain: uint32(domain), Bus: uint32(bus), PciDeviceId: d.Config.PciDeviceId}
		putCString(info.BusId[:], busID)
		putCString(info.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:00.0", domain, bus))
		d.UUID = gpu.DeviceUUID(node, d.Minor)
		d.PciBusID = busID
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return info, nvml.SUCCESS }
		patchMIGDevices(d)
		roots[busID] = place{pcieRoot: slot.PCIeRoot(), numaNode: slot.NUMANode}
	}
	return roots, nil
}

func putCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// l4PCIe24GB is NVIDIA's L4 as NVML describes it: Ada Lovelace, compute
// capability 8.9, 23034 MiB of usable memory, PCI device 0x27b8, no MIG.
var l4PCIe24GB = gpus.Config{
	Name:         "NVIDIA L4",
	Architecture: nvml.DEVICE_ARCH_ADA,
	Brand:        nvml.BRAND_NVIDIA,
	MemoryMB:     23034,
	CudaMajor:    8,
	CudaMinor:    9,
	PciDeviceId:  0x27B810DE,
}

// maxMIGDevices is what NVML reports as GetMaxMigDeviceCount on A100 and
// H100: seven instances of one compute slice.
const maxMIGDevices = 7

// patchMIGDevices gives a mock GPU the MIG device handles that go-nvml's
// mock lacks (GetMaxMigDeviceCount, GetMigDeviceHandleByIndex): one per
// compute instance of its GPU instances, in instance order, each with its
// GPU and compute instance IDs and a UUID derived from them and the GPU's.
func patchMIGDevices(d *server.Device) {
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return maxMIGDevices, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		migs := mockMIGDevices(d)
		if i < 0 || i >= maxMIGDevices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if i >= len(migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[i], nvml.SUCCESS
	}
}

func mockMIGDevices(d *server.Device) []nvml.Device {
	d.RLock()
	gis := slices.Collect(maps.Keys(d.GpuInstances))
	parent := d.UUID
	d.RUnlock()
	slices.SortFunc(gis, func(a, b *server.GpuInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
	var out []nvml.Device
	for _, gi := range gis {
		gi.RLock()
		cis := slices.Collect(maps.Keys(gi.ComputeInstances))
		gi.RUnlock()
		slices.SortFunc(cis, func(a, b *server.ComputeInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
		for _, ci := range cis {
			giID, ciID := int(gi.Info.Id), int(ci.Info.Id)
			sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", parent, giID, ciID))
			uuid := fmt.Sprintf("MIG-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
			out = append(out, &mock.Device{
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return giID, nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
				GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			})
		}
	}
	return out
}

func timeAfterMs(ms uint32) <-chan time.Time {
	return time.After(time.Duration(ms) * time.Millisecond)
}
