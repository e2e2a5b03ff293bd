package kind

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/dralab/dralab/internal/nodedrivers"
)

// Host is what the machine the kind nodes run on lacks (and the NVIDIA
// driver it has), which their configuration adapts to. Nothing of the host's own configuration is
// changed: the nodes are configured, the host is not.
type Host struct {
	// CgroupV1: the host mounts cgroup v1, which a kubelet of 1.35 or
	// later refuses unless its configuration says failCgroupV1: false.
	CgroupV1 bool
	// HybridCgroups: the host mounts cgroup v1 and, beside it, cgroup v2
	// (systemd's "hybrid" layout, /sys/fs/cgroup/unified), which crun
	// refuses to run containers on.
	HybridCgroups bool
	// NoSysResource: the engine's processes lack CAP_SYS_RESOURCE, so a
	// container may not be given a negative oom_score_adj: containerd in
	// the nodes must not try (restrict_oom_score_adj).
	NoSysResource bool
	// NVIDIA is the host's NVIDIA driver, which a node of the host's GPUs
	// (gpus.nvml: host) is given; nil where the host has none.
	NVIDIA *NVIDIA
	// noNVIDIA says why NVIDIA is nil.
	noNVIDIA error
}

// NVIDIA is what a kind node of the host's GPUs is given of the host's
// NVIDIA driver: its device files, at their paths, and the directory of
// its NVML library, read-only under nodedrivers.HostDriverRoot.
type NVIDIA struct {
	// Root is the host's root ("/"; a test's directory in tests).
	Root string
	// Devices are the device files of the GPUs and of the driver
	// (nvidiactl, nvidia-uvm, the MIG capabilities' nvidia-caps), relative
	// to Root: dev/nvidia0, dev/nvidiactl, ...
	Devices []string
	// LibraryDir is the directory of libnvidia-ml.so.1, relative to Root.
	LibraryDir string
}

// DetectNVIDIA reads the NVIDIA driver installed under root: nil, and
// why, where root has no /dev/nvidiactl or no NVML library.
func DetectNVIDIA(root string) (*NVIDIA, error) {
	if _, err := os.Stat(filepath.Join(root, "dev/nvidiactl")); err != nil {
		return nil, fmt.Errorf("no NVIDIA driver on this machine: %w", err)
	}
	lib, err := nodedrivers.NVMLLibraryDir(root)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(root, "dev/nvidia*"))
	if err != nil {
		return nil, err
	}
	n := &NVIDIA{Root: root, LibraryDir: lib}
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			return nil, err
		}
		n.Devices = append(n.Devices, rel)
	}
	return n, nil
}

// mounts are the node's mounts of the host's NVIDIA driver.
func (n *NVIDIA) mounts() []v1alpha4.Mount {
	var out []v1alpha4.Mount
	for _, d := range n.Devices {
		out = append(out, v1alpha4.Mount{HostPath: filepath.Join(n.Root, d), ContainerPath: "/" + d})
	}
	return append(out, v1alpha4.Mount{
		HostPath:      filepath.Join(n.Root, n.LibraryDir),
		ContainerPath: filepath.Join(nodedrivers.HostDriverRoot, n.LibraryDir),
		Readonly:      true,
	})
}

// capSysResource is CAP_SYS_RESOURCE's bit in a capability set.
const capSysResource = 24

// DetectHost reads what this machine lacks.
func DetectHost() Host {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers") // cgroup v2's root has it
	status, _ := os.ReadFile("/proc/self/status")
	h := Host{CgroupV1: err != nil, NoSysResource: !hasCapability(status, capSysResource)}
	h.HybridCgroups = h.CgroupV1 && cgroup2At("/sys/fs/cgroup/unified")
	h.NVIDIA, h.noNVIDIA = DetectNVIDIA("/")
	return h
}

// hasCapability tells whether the effective capabilities of a
// /proc/<pid>/status hold the capability of that bit.
func hasCapability(status []byte, bit uint) bool {
	s := bufio.NewScanner(bytes.NewReader(status))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// Patches adapting the nodes to the host.
const (
	// cgroupV1Patch lets the nodes' kubelets run on cgroup v1 (kubeadm's
	// preflight refuses it too, unless its SystemVerification check is
	// skipped: preflight).
	cgroupV1Patch = `kind: KubeletConfiguration
failCgroupV1: false
`
	// oomScorePatch keeps containerd from giving containers a negative
	// oom_score_adj, which needs CAP_SYS_RESOURCE.
	oomScorePatch = `[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
`
)

// patches are the kubeadm and containerd patches adapting the nodes to the
// host, and the kubeadm preflight checks the host fails though the nodes
// run (RenderFor gives kubeadm them in one patch per configuration).
func (h Host) patches() (kubeadm, containerd, preflight []string) {
	if h.CgroupV1 {
		kubeadm = append(kubeadm, cgroupV1Patch)
		preflight = append(preflight, "SystemVerification")
	}
	if h.NoSysResource {
		containerd = append(containerd, oomScorePatch)
	}
	return kubeadm, containerd, preflight
}
