//go:build cgo

package nvmllib

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/gpu"
	dnvml "github.com/dralab/dralab/drivers/nvml"
)

var _ dnvml.MIGManager = &lister{}

// migEnabled says whether a GPU's current MIG mode is enabled. A GPU
// without MIG (NOT_SUPPORTED) is not.
func migEnabled(d nvml.Device) (bool, error) {
	current, _, ret := d.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		return current == nvml.DEVICE_MIG_ENABLE, nil
	case nvml.ERROR_NOT_SUPPORTED:
		return false, nil
	}
	return false, &callError{call: "GetMigMode", ret: ret}
}

// giProfile is a GPU instance profile as NVML reports it: the index NVML's
// queries take, the profile and its placements.
type giProfile struct {
	index      int
	info       nvml.GpuInstanceProfileInfo
	placements []nvml.GpuInstancePlacement
}

// giProfiles lists the GPU instance profiles a GPU in MIG mode offers.
func giProfiles(d nvml.Device) ([]giProfile, error) {
	var out []giProfile
	for i := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(i)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, &callError{call: fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", i), ret: ret}
		}
		if info.InstanceCount == 0 {
			continue
		}
		placements, ret := d.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, &callError{call: fmt.Sprintf("GetGpuInstancePossiblePlacements(profile %d)", info.Id), ret: ret}
		}
		if len(placements) == 0 {
			continue
		}
		out = append(out, giProfile{index: i, info: info, placements: placements})
	}
	return out, nil
}

// mediaExtensions are the profiles NVIDIA names with a "+me" suffix: one
// compute slice with the GPU's media engines.
var mediaExtensions = []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1}

// profileName is NVIDIA's name of a GPU instance profile: compute slices,
// and memory in GB rounded up (4864 MB → 1g.5gb).
func profileName(p giProfile) string {
	name := fmt.Sprintf("%dg.%dgb", p.info.SliceCount, (p.info.MemorySizeMB+1023)/1024)
	if slices.Contains(mediaExtensions, p.index) {
		name += "+me"
	}
	return name
}

// migGeometry is a GPU's MIG geometry from its GPU instance profiles: the
// memory slices are those the placements cover, the GPU's engines and
// multiprocessors those of its largest profile.
func migGeometry(logger klog.Logger, d nvml.Device) (*gpu.MIG, int, error) {
	profiles, err := giProfiles(d)
	if err != nil {
		return nil, 0, err
	}
	m := &gpu.MIG{}
	mps := 0
	names := map[string]bool{}
	for _, p := range profiles {
		name := profileName(p)
		if names[name] {
			logger.Info("Leaving out a GPU instance profile with the name of another", "profile", name, "id", p.info.Id)
			continue
		}
		names[name] = true
		mp := gpu.MIGProfile{
			Name: name, ID: int(p.info.Id),
			Memory:          *resource.NewQuantity(int64(p.info.MemorySizeMB)*1024*1024, resource.BinarySI),
			Multiprocessors: int(p.info.MultiprocessorCount),
			Engines: gpu.Engines{
				CopyEngines: int(p.info.CopyEngineCount), Decoders: int(p.info.DecoderCount), Encoders: int(p.info.EncoderCount),
				JPEGs: int(p.info.JpegCount), OFAs: int(p.info.OfaCount),
			},
			MemorySlices: int(p.placements[0].Size),
		}
		for _, pl := range p.placements {
			mp.Placements = append(mp.Placements, int(pl.Start))
			m.MemorySlices = max(m.MemorySlices, int(pl.Start+pl.Size))
		}
		if mp.Multiprocessors > mps {
			mps, m.Engines = mp.Multiprocessors, mp.Engines
		}
		m.Profiles = append(m.Profiles, mp)
	}
	if len(m.Profiles) == 0 {
		return nil, 0, nil
	}
	if m.MemorySlices > resourceMaxMemorySlices {
		return nil, 0, fmt.Errorf("MIG geometry of %d memory slices: a counter set holds at most %d", m.MemorySlices, resourceMaxMemorySlices)
	}
	return m, mps, nil
}

// resourceMaxMemorySlices keeps a GPU's counter set (a counter per memory
// slice and per capacity dimension) within the API's 32 counters.
const resourceMaxMemorySlices = 8

// CreateMIG implements dnvml.MIGManager.
func (l *lister) CreateMIG(ctx context.Context, p dnvml.MIGPlacement) (dnvml.MIGInstance, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inst := dnvml.MIGInstance{MIGPlacement: p}
	d, prof, err := l.placementProfile(p)
	if err != nil {
		return inst, err
	}
	logger := klog.FromContext(ctx).WithValues("gpu", p.ParentUUID, "profile", prof.info.Id, "start", p.Start)
	gi, err := giAt(d, prof, p.Start)
	if err != nil {
		return inst, err
	}
	made := false
	if gi == nil {
		placement := nvml.GpuInstancePlacement{Start: uint32(p.Start), Size: prof.placements[0].Size}
		var ret nvml.Return
		if gi, ret = d.CreateGpuInstanceWithPlacement(&prof.info, &placement); ret != nvml.SUCCESS {
			return inst, &callError{call: "CreateGpuInstanceWithPlacement", ret: ret}
		}
		made = true
		logger.V(1).Info("Created GPU instance")
	}
	inst, err = completeInstance(d, gi, prof, inst)
	if err != nil && made {
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			err = errors.Join(err, &callError{call: "GpuInstance.Destroy", ret: ret})
		}
	}
	return inst, err
}

// completeInstance gives a GPU instance its compute instance (adopting one
// that exists) and finds the MIG device's UUID.
func completeInstance(d nvml.Device, gi nvml.GpuInstance, prof giProfile, inst dnvml.MIGInstance) (dnvml.MIGInstance, error) {
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return inst, &callError{call: "GpuInstance.GetInfo", ret: ret}
	}
	ciProf, err := fullComputeProfile(gi, prof.info.SliceCount)
	if err != nil {
		return inst, err
	}
	cis, ret := gi.GetComputeInstances(&ciProf)
	if ret != nvml.SUCCESS {
		return inst, &callError{call: "GpuInstance.GetComputeInstances", ret: ret}
	}
	var ci nvml.ComputeInstance
	if len(cis) > 0 {
		ci = cis[0]
	} else if ci, ret = gi.CreateComputeInstance(&ciProf); ret != nvml.SUCCESS {
		return inst, &callError{call: "GpuInstance.CreateComputeInstance", ret: ret}
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return inst, &callError{call: "ComputeInstance.GetInfo", ret: ret}
	}
	inst.GPUInstanceID, inst.ComputeInstanceID = int(giInfo.Id), int(ciInfo.Id)
	inst.UUID, err = migUUID(d, giInfo.Id, ciInfo.Id)
	if err != nil {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			err = errors.Join(err, &callError{call: "ComputeInstance.Destroy", ret: ret})
		}
	}
	return inst, err
}

// fullComputeProfile is the compute instance profile that takes all of a
// GPU instance's compute slices.
func fullComputeProfile(gi nvml.GpuInstance, slices uint32) (nvml.ComputeInstanceProfileInfo, error) {
	for i := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(i, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && info.SliceCount == slices {
			return info, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, fmt.Errorf("the GPU instance has no compute instance profile of %d slices", slices)
}

// migUUID finds the UUID of the MIG device of a GPU and compute instance.
func migUUID(d nvml.Device, giID, ciID uint32) (string, error) {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return "", &callError{call: "GetMaxMigDeviceCount", ret: ret}
	}
	for i := range n {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return "", &callError{call: "GetMigDeviceHandleByIndex", ret: ret}
		}
		gi, ret := m.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return "", &callError{call: "MIG device GetGpuInstanceId", ret: ret}
		}
		ci, ret := m.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return "", &callError{call: "MIG device GetComputeInstanceId", ret: ret}
		}
		if gi == int(giID) && ci == int(ciID) {
			return required("MIG device GetUUID", m.GetUUID)
		}
	}
	return "", fmt.Errorf("no MIG device of GPU instance %d and compute instance %d", giID, ciID)
}

// DestroyMIG implements dnvml.MIGManager.
func (l *lister) DestroyMIG(ctx context.Context, p dnvml.MIGPlacement) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, prof, err := l.placementProfile(p)
	if err != nil {
		return err
	}
	gi, err := giAt(d, prof, p.Start)
	if err != nil || gi == nil {
		return err
	}
	for i := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(i, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return &callError{call: "GpuInstance.GetComputeInstances", ret: ret}
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
				return &callError{call: "ComputeInstance.Destroy", ret: ret}
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
		return &callError{call: "GpuInstance.Destroy", ret: ret}
	}
	klog.FromContext(ctx).V(1).Info("Destroyed GPU instance", "gpu", p.ParentUUID, "profile", p.ProfileID, "start", p.Start)
	return nil
}

// placementProfile is the GPU of a placement and its profile.
func (l *lister) placementProfile(p dnvml.MIGPlacement) (nvml.Device, giProfile, error) {
	if l.lib == nil {
		return nil, giProfile{}, errors.New("NVML lister is closed")
	}
	d, ret := l.lib.DeviceGetHandleByUUID(p.ParentUUID)
	if ret != nvml.SUCCESS {
		return nil, giProfile{}, fmt.Errorf("GPU %s: %w", p.ParentUUID, &callError{call: "DeviceGetHandleByUUID", ret: ret})
	}
	profiles, err := giProfiles(d)
	if err != nil {
		return nil, giProfile{}, fmt.Errorf("GPU %s: %w", p.ParentUUID, err)
	}
	for _, prof := range profiles {
		if int(prof.info.Id) != p.ProfileID {
			continue
		}
		for _, pl := range prof.placements {
			if int(pl.Start) == p.Start {
				return d, prof, nil
			}
		}
		return nil, giProfile{}, fmt.Errorf("GPU %s: GPU instance profile %d has no placement at memory slice %d", p.ParentUUID, p.ProfileID, p.Start)
	}
	return nil, giProfile{}, fmt.Errorf("GPU %s has no GPU instance profile %d: is its MIG mode still enabled?", p.ParentUUID, p.ProfileID)
}

// giAt is the GPU instance of a profile at a memory slice, nil if none.
func giAt(d nvml.Device, prof giProfile, start int) (nvml.GpuInstance, error) {
	gis, ret := d.GetGpuInstances(&prof.info)
	if ret != nvml.SUCCESS {
		return nil, &callError{call: "GetGpuInstances", ret: ret}
	}
	for _, gi := range gis {
		info, ret := gi.GetInfo()
		if ret != nvml.SUCCESS {
			return nil, &callError{call: "GpuInstance.GetInfo", ret: ret}
		}
		if int(info.Placement.Start) == start {
			return gi, nil
		}
	}
	return nil, nil
}
