package config

import (
	"fmt"
	resourceapi "k8s.io/api/resource/v1"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxGPUsPerNode bounds a node's GPU count to what real servers carry, with room.
const MaxGPUsPerNode = 64

// GPUs say what GPUs a node carries: Count fake GPUs of a Profile, or
// those NVML reports.
type GPUs struct {
	// Profile names the GPU model of fake GPUs, e.g. "h100-80gb".
	Profile string `json:"profile,omitempty"`
	// Count is the number of fake GPUs.
	Count int `json:"count,omitempty"`
	// NVML takes the GPUs from NVIDIA's management library instead:
	// "host" (this machine's GPUs, through the NVIDIA driver) or
	// "mock:<server>" (go-nvml's mock servers, e.g. mock:dgxh100).
	NVML string `json:"nvml,omitempty"`
	// Mode is how the node's driver serves them: "dra" (the default,
	// ResourceSlices and claims) or "device-plugin" (an extended resource
	// count, the way GPU device plugins work). Never both on one node.
	Mode string `json:"mode,omitempty"`
	// Partitioning "mig" publishes every MIG placement of each fake GPU
	// beside the whole GPU, all drawing from the GPU's counters (a profile
	// with MIG geometry: h100-80gb, a100-80gb, a100-40gb).
	Partitioning string `json:"partitioning,omitempty"`
	// Sharing "memory" lets several claims share each fake GPU, each asking
	// for some of its memory (capacity.requests.memory).
	Sharing string `json:"sharing,omitempty"`
	// TimeSlices offers each fake GPU as this many time-sliced shares too
	// (class time-slice.gpu.dralab.dev), each taking one of the GPU's time
	// slices, the whole GPU all of them. With partitioning: mig the GPU
	// runs MIG devices or shares, whichever a claim gets first: the two
	// declare different compatibility groups, which needs the
	// DRADeviceCompatibilityGroups gate (alpha, off by default).
	TimeSlices int `json:"timeSlices,omitempty"`
	// Attach "fabric" models GPUs in a PCIe/CXL switch, attached to the
	// node on demand: each whole GPU publishes the binding condition
	// dralab.dev/attached (failure: dralab.dev/attach-failed), the
	// scheduler holds a pod in PreBind until the lab's attach controller
	// sets it, and a GPU failed with gpu:fail fails the attachment instead.
	// Whole fake GPUs served through DRA only, on the embedded backend.
	Attach string `json:"attach,omitempty"`
	// AttachDelay is how long attaching a GPU takes, a duration such as
	// "2s" or "500ms" (default 2s, at most 5m: the scheduler gives up on
	// binding conditions after 10 minutes). Only with attach.
	AttachDelay string `json:"attachDelay,omitempty"`
	// DeviceMetadata gives each container of a claim a file of its GPUs'
	// attributes, mounted through CDI at
	// /var/run/kubernetes.io/dra-device-attributes/…/gpu.dralab.dev-metadata.json
	// (device metadata, beta in Kubernetes 1.37, a kubelet-plugin option:
	// no gate). Fake and NVML GPUs served through DRA, on the embedded
	// backend.
	DeviceMetadata bool `json:"deviceMetadata,omitempty"`
	// DevicesPerSlice publishes the node's GPU pool in slices of at most
	// this many devices (the counter sets in slices of their own), as a
	// driver with more devices than one slice holds does: the pool's
	// resourceSliceCount names them all, and the allocator takes no
	// device of the pool until every slice of its newest generation is
	// published (the slice controller moves to the next generation where a
	// change needs more than one slice written).
	// 0: as many as the API allows (128, 64 with counters or taints).
	// Devices served through DRA, on the embedded backend.
	DevicesPerSlice int `json:"devicesPerSlice,omitempty"`
	// SliceWriteInterval is the least time between two of the driver's
	// ResourceSlice writes, a duration such as "1s" (at most 1m), as
	// where the API server throttles a driver: a pool of several slices
	// moving to a new generation is incomplete for as long as its writes
	// take, which the allocator waits out. Devices served through DRA, on
	// the embedded backend.
	SliceWriteInterval string `json:"sliceWriteInterval,omitempty"`
}

// MaxSliceWriteInterval bounds sliceWriteInterval: a pool of a few slices
// is incomplete for seconds, not for the minutes after which a scenario or
// a user gives up on it.
const MaxSliceWriteInterval = time.Minute

// DefaultAttachDelay is how long attaching a fabric GPU takes unless
// attachDelay says otherwise.
const DefaultAttachDelay = 2 * time.Second

// MaxAttachDelay bounds attachDelay well below the scheduler's binding
// timeout (600 s), so that an attachment is never given up on for being slow.
const MaxAttachDelay = 5 * time.Minute

// AttachDuration is the node's attach delay: attachDelay, or the default.
// The configuration is validated, so the value parses.
func (g *GPUs) AttachDuration() time.Duration {
	if g == nil || g.AttachDelay == "" {
		return DefaultAttachDelay
	}
	d, err := time.ParseDuration(g.AttachDelay)
	if err != nil {
		return DefaultAttachDelay
	}
	return d
}

// GPU modes.
const (
	GPUModeDRA          = "dra"
	GPUModeDevicePlugin = "device-plugin"
)

// The values of a node's GPUs section that name what the GPU driver does;
// the driver's packages spell them the same (lab's tests check).
const (
	// NVMLHost reads the machine's NVML library; NVMLMockPrefix+<server>
	// one of go-nvml's mock servers.
	NVMLHost       = "host"
	NVMLMockPrefix = "mock:"
	// PartitioningMIG publishes MIG partitions of each GPU; SharingMemory
	// lets claims share a GPU's memory; AttachFabric attaches the GPUs from
	// a fabric, with binding conditions.
	PartitioningMIG = "mig"
	SharingMemory   = "memory"
	AttachFabric    = "fabric"
	// MaxTimeSlices bounds timeSlices.
	MaxTimeSlices = 16
)

// isSet tells whether the node has GPUs.
func (g *GPUs) isSet() bool { return g != nil }

// validate checks a node's GPUs: dralab's GPU driver's (an outside driver
// brings its own devices), with the gates their alpha fields need.
func (g *GPUs) validate(c *Config, _ *Node, p *field.Path, _ sets.Set[string]) field.ErrorList {
	gp := p.Child("gpus")
	if c.Driver != nil {
		return field.ErrorList{field.Forbidden(gp, "the lab runs driver.command on every node instead of dralab's GPU driver: its devices are the outside driver's")}
	}
	var errs field.ErrorList
	if g.TimeSlices > 0 && g.Partitioning != "" && !c.GateEnabled(GateDeviceCompatibilityGroups) {
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "time slices beside MIG partitions need featureGates: {"+GateDeviceCompatibilityGroups+": true} (alpha, off by default): the two declare compatibility groups, and a scheduler without the gate ignores the node's GPUs"))
	}
	return append(errs, g.validateSection(gp)...)
}

// validateSection checks what a GPUs section itself says, whatever the
// lab around it.
func (g *GPUs) validateSection(gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case g.NVML != "":
		if g.Profile != "" || g.Count != 0 {
			errs = append(errs, field.Forbidden(gp.Child("nvml"), "NVML reports the GPUs: give profile and count, or nvml, not both"))
		}
		if !strings.HasPrefix(g.NVML, NVMLMockPrefix) && g.NVML != NVMLHost {
			errs = append(errs, field.NotSupported(gp.Child("nvml"), g.NVML, []string{NVMLHost, NVMLMockPrefix + "<server>"}))
		}
	case g.Profile == "":
		errs = append(errs, field.Required(gp.Child("profile"), "name a GPU profile, e.g. h100-80gb (or set nvml)"))
	default:
		if g.Count < 1 || g.Count > MaxGPUsPerNode {
			errs = append(errs, field.Invalid(gp.Child("count"), g.Count, fmt.Sprintf("must be between 1 and %d", MaxGPUsPerNode)))
		}
	}
	if g.Mode != GPUModeDRA && g.Mode != GPUModeDevicePlugin {
		errs = append(errs, field.NotSupported(gp.Child("mode"), g.Mode, []string{GPUModeDRA, GPUModeDevicePlugin}))
	}
	errs = append(errs, g.validateModes(gp)...)
	if g.DeviceMetadata && g.Mode == GPUModeDevicePlugin {
		errs = append(errs, field.Forbidden(gp.Child("deviceMetadata"), "the kubelet gives device metadata to claims; mode device-plugin serves an extended resource"))
	}
	switch n := g.DevicesPerSlice; {
	case n == 0:
	case n < 0 || n > resourceapi.ResourceSliceMaxDevices:
		errs = append(errs, field.Invalid(gp.Child("devicesPerSlice"), n, fmt.Sprintf("must be between 1 and %d, the API's limit on a slice", resourceapi.ResourceSliceMaxDevices)))
	case g.Mode == GPUModeDevicePlugin:
		errs = append(errs, field.Forbidden(gp.Child("devicesPerSlice"), "mode device-plugin publishes no ResourceSlice; devicesPerSlice needs mode dra"))
	}
	if v := g.SliceWriteInterval; v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(gp.Child("sliceWriteInterval"), v, "must be a duration such as 1s or 500ms"))
		case d < 0 || d > MaxSliceWriteInterval:
			errs = append(errs, field.Invalid(gp.Child("sliceWriteInterval"), v, fmt.Sprintf("must be between 0s and %v", MaxSliceWriteInterval)))
		case g.Mode == GPUModeDevicePlugin:
			errs = append(errs, field.Forbidden(gp.Child("sliceWriteInterval"), "mode device-plugin publishes no ResourceSlice; sliceWriteInterval needs mode dra"))
		}
	}
	return append(errs, g.validateAttach(gp)...)
}

// validateAttach checks attach and attachDelay: one value, whole fake
// GPUs served through DRA only, and a delay the scheduler waits for.
func (g *GPUs) validateAttach(gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case g.Attach == "":
		if g.AttachDelay != "" {
			errs = append(errs, field.Forbidden(gp.Child("attachDelay"), "attachDelay is the attach delay of attach: "+AttachFabric+"; set attach too or drop it"))
		}
		return errs
	case g.Attach != AttachFabric:
		errs = append(errs, field.NotSupported(gp.Child("attach"), g.Attach, []string{AttachFabric}))
	case g.NVML != "":
		errs = append(errs, field.Forbidden(gp.Child("attach"), "only fake GPUs (profile and count) are fabric-attached by the lab"))
	case g.Mode == GPUModeDevicePlugin:
		errs = append(errs, field.Forbidden(gp.Child("attach"), "mode device-plugin counts whole GPUs and has no binding conditions; attach needs mode dra"))
	case g.Partitioning != "" || g.Sharing != "":
		errs = append(errs, field.Forbidden(gp.Child("attach"), "a fabric-attached GPU is attached whole, to one claim: not with partitioning or sharing, so far"))
	}
	if g.AttachDelay != "" {
		d, err := time.ParseDuration(g.AttachDelay)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(gp.Child("attachDelay"), g.AttachDelay, "must be a duration such as 2s or 500ms"))
		case d < 0 || d > MaxAttachDelay:
			errs = append(errs, field.Invalid(gp.Child("attachDelay"), g.AttachDelay, fmt.Sprintf("must be between 0s and %v: the scheduler gives up on binding conditions after 10m", MaxAttachDelay)))
		}
	}
	return errs
}

// validateModes checks partitioning and sharing: each has one value, a
// GPU is partitioned or shared, not both, and only fake GPUs served
// through DRA are (counting mode counts whole GPUs).
func (g *GPUs) validateModes(gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, m := range []struct {
		name, value, want string
	}{{"partitioning", g.Partitioning, PartitioningMIG}, {"sharing", g.Sharing, SharingMemory}} {
		switch {
		case m.value == "":
			continue
		case m.value != m.want:
			errs = append(errs, field.NotSupported(gp.Child(m.name), m.value, []string{m.want}))
		case g.NVML != "":
			errs = append(errs, field.Forbidden(gp.Child(m.name), "only fake GPUs (profile and count) are partitioned or shared by the lab"))
		case g.Mode == GPUModeDevicePlugin:
			errs = append(errs, field.Forbidden(gp.Child(m.name), "mode device-plugin counts whole GPUs; partitioning and sharing need mode dra"))
		}
	}
	if g.Partitioning != "" && g.Sharing != "" {
		errs = append(errs, field.Forbidden(gp.Child("sharing"), "a GPU is partitioned or shared, not both: give partitioning or sharing"))
	}
	switch ts := g.TimeSlices; {
	case ts == 0:
	case ts < 0 || ts > MaxTimeSlices:
		errs = append(errs, field.Invalid(gp.Child("timeSlices"), ts, fmt.Sprintf("must be between 1 and %d", MaxTimeSlices)))
	case g.NVML != "":
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "only fake GPUs (profile and count) are time-sliced by the lab"))
	case g.Mode == GPUModeDevicePlugin:
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "mode device-plugin counts whole GPUs; time slices need mode dra"))
	case g.Sharing != "":
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "a GPU shared by memory is not time-sliced too: give sharing or timeSlices"))
	}
	return errs
}

// limits: the kind backend's chart passes the driver its inventory,
// mode and topology, not the embedded lab's other GPU settings.
func (*GPUs) limits() []backendLimit {
	return []backendLimit{
		{backend: BackendKind, field: []string{"gpus"}, node: func(n *Node) bool {
			return n.GPUs != nil && (n.GPUs.Partitioning != "" || n.GPUs.Sharing != "" || n.GPUs.TimeSlices != 0)
		}, why: "partitioning, sharing and time slices run on the embedded backend only, so far: the kind backend's chart does not pass them to the driver"},
		{backend: BackendKind, field: []string{"gpus", "deviceMetadata"}, node: func(n *Node) bool { return n.GPUs != nil && n.GPUs.DeviceMetadata },
			why: "device metadata runs on the embedded backend only, so far: the kind backend's chart does not pass it to the driver"},
		{backend: BackendKind, field: []string{"gpus", "devicesPerSlice"}, node: func(n *Node) bool { return n.GPUs != nil && n.GPUs.DevicesPerSlice != 0 },
			why: "devicesPerSlice runs on the embedded backend only, so far: the kind backend's chart does not pass it to the driver"},
		{backend: BackendKind, field: []string{"gpus", "sliceWriteInterval"}, node: func(n *Node) bool { return n.GPUs != nil && n.GPUs.SliceWriteInterval != "" },
			why: "sliceWriteInterval runs on the embedded backend only, so far: the kind backend's chart does not pass it to the driver"},
		{backend: BackendKind, field: []string{"gpus", "attach"}, node: func(n *Node) bool { return n.GPUs != nil && n.GPUs.Attach != "" },
			why: "fabric attach runs on the embedded backend only, so far: its attach controller is part of the embedded lab process"},
	}
}
