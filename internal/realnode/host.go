package realnode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/labstate"
)

// A real node changes the host outside its state directory: cgroups, a
// bridge, iptables chains, the kubelet's fixed device-plugin directory. The
// lab records each such thing when it creates it, in the node's host
// record, and clean-up removes exactly what the record names — never every
// "kubepods" cgroup or KUBE-* chain on the host — from the record alone,
// without the lab's configuration.

// HostRecord is what a real node created on the host.
type HostRecord struct {
	// Lab names the lab, whose state directory holds the node.
	Lab string `json:"lab"`
	// CgroupRoot is the kubelet's --cgroup-root, "/dralab-<lab>": every
	// pod's cgroup lies below it.
	CgroupRoot string `json:"cgroupRoot"`
	// CgroupDirs are CgroupRoot in each cgroup hierarchy, created by the lab.
	CgroupDirs []string `json:"cgroupDirs,omitempty"`
	// Bridge is the CNI bridge, when the node's pods created it.
	Bridge string `json:"bridge,omitempty"`
	// ChainsBefore are the host's iptables chains ("family/table/chain") before
	// the kubelet started; ChainsCreated those it created, recorded once
	// the node was up; ChainsRecorded says that recording happened.
	ChainsBefore   []string `json:"chainsBefore,omitempty"`
	ChainsCreated  []string `json:"chainsCreated,omitempty"`
	ChainsRecorded bool     `json:"chainsRecorded,omitempty"`
	// PathsBefore are the kubelet's fixed host paths that existed before
	// it started; PathsCreated those it created.
	PathsBefore  []string `json:"pathsBefore,omitempty"`
	PathsCreated []string `json:"pathsCreated,omitempty"`
}

// HostRecordFile is the node's host record.
func (p Paths) HostRecordFile() string { return p.join("host.json") }

// DevicePluginsDir is the kubelet's device-plugin directory, compiled in
// whatever its --root-dir; KubeletSocket its registration socket there.
const (
	DevicePluginsDir = "/var/lib/kubelet/device-plugins"
	KubeletSocket    = DevicePluginsDir + "/kubelet.sock"
)

// KubeletHostPaths are the paths the real kubelet writes on the host
// whatever its --root-dir: the device-plugin directory, its parent, and
// the files the kubelet puts in it. Those it creates are recorded and
// removed; those that were there are left as they were.
var KubeletHostPaths = []string{
	"/var/lib/kubelet",
	DevicePluginsDir,
	KubeletSocket,
	DevicePluginsDir + "/kubelet_internal_checkpoint",
	// The lab's GPU driver's device-plugin socket, where it counts GPUs.
	DevicePluginsDir + "/" + gpu.DevicePluginSocket,
}

// kubeletChains are the iptables chains the kubelet creates, by table:
// the hint chain, its firewall chain (IPv4) and its canary. Only these
// are recorded as the node's: a KUBE-* chain another program makes on the
// host meanwhile (kube-proxy, another cluster's node) is not the lab's.
var kubeletChains = map[string][]string{
	"mangle": {"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"},
	"filter": {"KUBE-FIREWALL", "KUBE-KUBELET-CANARY"},
	"nat":    {"KUBE-KUBELET-CANARY"},
}

// kubeletChain tells whether a chain ("family/table/chain", or
// "table/chain") is one the kubelet creates.
func kubeletChain(c string) bool {
	parts := strings.Split(c, "/")
	if len(parts) < 2 {
		return false
	}
	return slices.Contains(kubeletChains[parts[len(parts)-2]], parts[len(parts)-1])
}

// CgroupMountsFile lists the host's mounts; a variable for tests.
var cgroupMountsFile = "/proc/self/mountinfo"

// cgroupHierarchies lists the mount points of the host's cgroup
// hierarchies (v1 controllers and the v2 unified one).
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open(cgroupMountsFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep > 4 && sep+1 < len(fields) && (fields[sep+1] == "cgroup" || fields[sep+1] == "cgroup2") {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// ErrHostInUse means another lab's real node runs on this host.
var ErrHostInUse = errors.New("another lab's real node runs on this host")

// checkNoOtherRealNode refuses a second real node: the kubelet's
// device-plugin socket path is fixed, and the CNI bridge has one name.
func checkNoOtherRealNode() error {
	if _, err := net.InterfaceByName(BridgeName); err == nil {
		return fmt.Errorf("%w: its bridge %s exists; delete that lab first (go run mage.go lab:list, then DRALAB_LAB=<name> go run mage.go lab:down)", ErrHostInUse, BridgeName)
	}
	sock := KubeletSocket
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		return fmt.Errorf("%w: a kubelet serves %s; delete that lab first (go run mage.go lab:list, then DRALAB_LAB=<name> go run mage.go lab:down)", ErrHostInUse, sock)
	}
	return nil
}

// CgroupRoot is the cgroup a lab's real node puts its pods under.
func CgroupRoot(lab string) string { return "/dralab-" + lab }

// PrepareHost creates the node's cgroup root in every hierarchy and
// records it, with the iptables chains and kubelet host paths present
// before the kubelet starts. The record is written before anything is
// created, and again after, so that a crash in between leaves a record.
func PrepareHost(ctx context.Context, p Paths, lab string) (*HostRecord, error) {
	if err := checkNoOtherRealNode(); err != nil {
		return nil, err
	}
	rec := &HostRecord{Lab: lab, CgroupRoot: CgroupRoot(lab), ChainsBefore: IptablesChains(ctx)}
	for _, path := range KubeletHostPaths {
		if _, err := os.Lstat(path); err == nil {
			rec.PathsBefore = append(rec.PathsBefore, path)
		}
	}
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	for _, h := range hierarchies {
		rec.CgroupDirs = append(rec.CgroupDirs, filepath.Join(h, rec.CgroupRoot))
	}
	if err := rec.Write(p); err != nil {
		return nil, err
	}
	for _, d := range rec.CgroupDirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("cgroup %s exists already: another lab named %q has a real node on this host; delete it first", d, lab)
			}
			return nil, fmt.Errorf("creating cgroup %s: %w", d, err)
		}
	}
	return rec, nil
}

// RecordStarted records what the kubelet and the node's pods created on
// the host since PrepareHost: KUBE-* chains, the bridge and the kubelet's
// host paths.
func (rec *HostRecord) RecordStarted(ctx context.Context, p Paths) error {
	had := map[string]bool{}
	for _, c := range rec.ChainsBefore {
		had[c] = true
	}
	rec.ChainsCreated = nil
	for _, c := range IptablesChains(ctx) {
		if !had[c] && kubeletChain(c) {
			rec.ChainsCreated = append(rec.ChainsCreated, c)
		}
	}
	rec.ChainsRecorded = true
	rec.PathsCreated = nil
	for _, path := range KubeletHostPaths {
		if _, err := os.Lstat(path); err == nil && !slices.Contains(rec.PathsBefore, path) {
			rec.PathsCreated = append(rec.PathsCreated, path)
		}
	}
	// The driver's socket may come after the kubelet's: whatever was not
	// there before the node started is the node's, recorded or not yet.
	if sock := DevicePluginsDir + "/" + gpu.DevicePluginSocket; !slices.Contains(rec.PathsBefore, sock) && !slices.Contains(rec.PathsCreated, sock) {
		rec.PathsCreated = append(rec.PathsCreated, sock)
	}
	return rec.Write(p)
}

// RecordBridge records the CNI bridge, once the node's first pod has
// created it.
func (rec *HostRecord) RecordBridge(p Paths) error {
	if rec.Bridge != "" {
		return nil
	}
	if _, err := net.InterfaceByName(BridgeName); err != nil {
		return nil
	}
	rec.Bridge = BridgeName
	return rec.Write(p)
}

// Write stores the record.
func (rec *HostRecord) Write(p Paths) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(p.HostRecordFile(), data, 0o600); err != nil {
		return fmt.Errorf("recording what the real node created on the host: %w", err)
	}
	return nil
}

// NodesWithHostRecords lists the real nodes of a lab that recorded
// changing the host, from the lab's state directory alone.
func NodesWithHostRecords(dir labstate.Dir) ([]Paths, error) {
	var out []Paths
	for _, nd := range dir.Nodes() {
		p := Paths{Node: nd}
		if _, err := os.Stat(p.HostRecordFile()); err == nil {
			out = append(out, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return out, nil
}

// ReadHostRecord reads a node's host record; os.ErrNotExist when the node
// never touched the host.
func ReadHostRecord(p Paths) (*HostRecord, error) {
	data, err := os.ReadFile(p.HostRecordFile())
	if err != nil {
		return nil, err
	}
	return parseHostRecord(p.HostRecordFile(), data)
}

// parseHostRecord decodes a host record; source names it in errors.
func parseHostRecord(source string, data []byte) (*HostRecord, error) {
	var rec HostRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("reading %s: %w", source, err)
	}
	return &rec, nil
}

// removeCgroupTree removes a cgroup and its children, leaves first.
func removeCgroupTree(root string) []error {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s (remove it with: rmdir %s, once its processes are gone): %w", d, d, err))
		}
	}
	return errs
}
