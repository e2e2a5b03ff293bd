package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/natural"
)

// TaintKeyXID is the taint a GPU driver puts on a device whose GPU reported
// a critical XID; its value is the XID.
const TaintKeyXID = DriverName + "/xid"

// TaintKeyUnwatched is the taint, of effect None, on a device whose GPU's
// Xids the driver cannot watch: its health is unknown; claims may still
// have it.
const TaintKeyUnwatched = DriverName + "/unwatched"

// XID is one of NVIDIA's Xid error codes, as the kernel driver logs them
// (NVIDIA's "XID Errors" catalogue) and NVML reports them as critical Xid
// events.
type XID struct {
	Code        int
	Description string
	// Effect is what the fault does to the device: NoExecute where the GPU
	// cannot run work any more (its pods are evicted), NoSchedule where
	// running work may go on but no new work should land until an
	// operator resets the GPU. Application errors are no device fault.
	Effect      resourceapi.DeviceTaintEffect
	Application bool
}

// XIDs are the codes the drivers know by name. The application errors are
// those NVIDIA's own DRA driver and device plugin skip (13, 31, 43, 45, 68,
// 109); any code not named here is treated as fatal, as they do.
var XIDs = map[int]XID{
	13:  {Code: 13, Description: "graphics engine exception", Application: true},
	31:  {Code: 31, Description: "GPU memory page fault", Application: true},
	43:  {Code: 43, Description: "GPU stopped processing", Application: true},
	45:  {Code: 45, Description: "preemptive cleanup, due to previous errors", Application: true},
	68:  {Code: 68, Description: "video processor exception", Application: true},
	109: {Code: 109, Description: "context switch timeout", Application: true},
	48:  {Code: 48, Description: "double-bit ECC error", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	63:  {Code: 63, Description: "ECC page retirement or row remapping recorded", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	64:  {Code: 64, Description: "ECC page retirement or row remapping failure", Effect: resourceapi.DeviceTaintEffectNoExecute},
	74:  {Code: 74, Description: "NVLink error", Effect: resourceapi.DeviceTaintEffectNoExecute},
	79:  {Code: 79, Description: "GPU has fallen off the bus", Effect: resourceapi.DeviceTaintEffectNoExecute},
	92:  {Code: 92, Description: "high single-bit ECC error rate", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	94:  {Code: 94, Description: "contained ECC error", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	95:  {Code: 95, Description: "uncontained ECC error", Effect: resourceapi.DeviceTaintEffectNoExecute},
}

// DefaultXID is what gpu:fail injects unless told otherwise.
const DefaultXID = 79

// LookupXID is a code's entry; an unknown code is a fatal fault.
func LookupXID(code int) XID {
	if x, ok := XIDs[code]; ok {
		return x
	}
	return XID{Code: code, Description: "unknown Xid", Effect: resourceapi.DeviceTaintEffectNoExecute}
}

// Fault is the device fault of an XID: unhealthy with the XID's message,
// and tainted with its effect. An application error is no fault (false).
func (x XID) Fault() (kit.DeviceFault, bool) {
	if x.Application {
		return kit.DeviceFault{}, false
	}
	return kit.DeviceFault{
		Message: fmt.Sprintf("XID %d: %s", x.Code, x.Description),
		Taint:   &resourceapi.DeviceTaint{Key: TaintKeyXID, Value: fmt.Sprint(x.Code), Effect: x.Effect},
	}, true
}

// Faults file: the GPUs a lab user failed with gpu:fail, which the node's
// driver watches. It lives in the node's state directory: no network
// listener is involved.
const (
	FaultsAPIVersion = "gpu.dralab.dev/v1alpha1"
	FaultsKind       = "GPUFaults"
)

// Faults are the failed GPUs of a node, by device name (gpu-0).
type Faults struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	GPUs       map[string]GPUFault `json:"gpus"`
}

// GPUFault is one failed GPU.
type GPUFault struct {
	XID int `json:"xid"`
	// Unattributed: NVML lost a GPU it did not name, and this one still
	// answers: it is kept from new claims (NoSchedule) whatever the Xid's
	// effect, and what runs on it goes on, as NVIDIA's device plugin and
	// DRA driver mark every device unhealthy then and evict nothing.
	Unattributed bool `json:"unattributed,omitempty"`
	// Unwatched: no Xid of the GPU can be seen (its events cannot be
	// registered, or the watch is down): its health is unknown, said in a
	// taint of effect None. XID is 0.
	Unwatched bool `json:"unwatched,omitempty"`
}

// ReadFaults reads a faults file strictly; a missing file is no fault.
func ReadFaults(path string) (map[string]GPUFault, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]GPUFault{}, nil
	}
	if err != nil {
		return nil, err
	}
	return parseFaults(path, data)
}

func parseFaults(path string, data []byte) (map[string]GPUFault, error) {
	var f Faults
	if err := strictyaml.Decode(data, &f); err != nil {
		return nil, fmt.Errorf("GPU faults file %s: %w", path, err)
	}
	if f.APIVersion != FaultsAPIVersion || f.Kind != FaultsKind {
		return nil, fmt.Errorf("GPU faults file %s: apiVersion %q, kind %q: want %s, %s", path, f.APIVersion, f.Kind, FaultsAPIVersion, FaultsKind)
	}
	for name, g := range f.GPUs {
		if g.XID <= 0 {
			return nil, fmt.Errorf("GPU faults file %s: gpus[%s].xid: Invalid value: %d: must be positive", path, name, g.XID)
		}
	}
	if f.GPUs == nil {
		f.GPUs = map[string]GPUFault{}
	}
	return f.GPUs, nil
}

// WriteFaults writes a faults file atomically; no fault removes it.
func WriteFaults(path string, gpus map[string]GPUFault) error {
	data, err := UpdateFaults(path, nil, func(f map[string]GPUFault) { maps.Copy(f, gpus) })
	if err != nil {
		return err
	}
	if data == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return kit.WriteFileAtomically(path, data, 0o644)
}

// UpdateFaults applies update to the faults of a file's contents (nil: no
// file) and returns the new contents (nil: no fault, no file): what a lab
// backend writes where the node's driver watches.
func UpdateFaults(source string, data []byte, update func(map[string]GPUFault)) ([]byte, error) {
	gpus := map[string]GPUFault{}
	if len(data) > 0 {
		var err error
		if gpus, err = parseFaults(source, data); err != nil {
			return nil, err
		}
	}
	update(gpus)
	if len(gpus) == 0 {
		return nil, nil
	}
	out, err := json.MarshalIndent(Faults{APIVersion: FaultsAPIVersion, Kind: FaultsKind, GPUs: gpus}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// DeviceFaults turns GPU faults into the faults of a node's devices: a
// failed GPU's whole device and its MIG devices (those whose parentUUID is
// the GPU's UUID). An XID of an application error fails nothing.
func DeviceFaults(devices []kit.Device, gpus map[string]GPUFault) (map[string]kit.DeviceFault, error) {
	uuids := map[string]string{}
	for _, d := range devices {
		if u := d.API.Attributes[AttrUUID].StringValue; u != nil {
			uuids[d.API.Name] = *u
		}
	}
	out := map[string]kit.DeviceFault{}
	for name, g := range gpus {
		uuid, ok := uuids[name]
		if !ok {
			return nil, fmt.Errorf("GPU fault of %q: no such GPU on this node; GPUs: %s", name, strings.Join(slices.SortedFunc(maps.Keys(uuids), natural.Compare), ", "))
		}
		fault, ok := LookupXID(g.XID).Fault()
		if g.Unwatched {
			fault, ok = kit.DeviceFault{
				Message: "its Xid events are not watched: health unknown",
				Taint:   &resourceapi.DeviceTaint{Key: TaintKeyUnwatched, Effect: resourceapi.DeviceTaintEffectNone},
				Unknown: true,
			}, true
		}
		if !ok {
			continue
		}
		if g.Unattributed {
			fault.Message = fmt.Sprintf("NVML lost a GPU it does not name (XID %d); this one still answers: kept from new claims", g.XID)
			fault.Taint.Effect = resourceapi.DeviceTaintEffectNoSchedule
		}
		for _, d := range devices {
			parent := d.API.Attributes[AttrParentUUID].StringValue
			if d.API.Name == name || (parent != nil && *parent == uuid) {
				out[d.API.Name] = fault
			}
		}
	}
	return out, nil
}

// WatchFaults polls a faults file and hands every change to apply, until
// ctx ends. A file that does not decode is logged and its last good
// contents stay in force: a user's typo must not heal the node's GPUs.
func WatchFaults(ctx context.Context, path string, interval time.Duration, apply func(context.Context, map[string]GPUFault) error) {
	logger := klog.FromContext(ctx).WithValues("file", path)
	var last []byte
	first := true
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			data, err = nil, nil
		}
		switch {
		case err != nil:
			logger.Error(err, "Reading the GPU faults file")
		case first || !bytes.Equal(data, last):
			gpus := map[string]GPUFault{}
			if data != nil {
				gpus, err = parseFaults(path, data)
			}
			if err != nil {
				logger.Error(err, "Ignoring a GPU faults file that does not decode; the last faults stay")
				last = data
				break
			}
			if err := apply(ctx, gpus); err != nil {
				logger.Error(err, "Applying GPU faults")
				break
			}
			first, last = false, data
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
