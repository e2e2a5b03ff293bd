// Package realnode prepares a real lab node: containerd (built from its Go
// module), Debian's runc and CNI plugins, the real kubelet, and images built
// without a registry. Everything the node writes lives under its directory
// in the lab's state, so that lab:down can undo it; what cannot (mounts,
// network interfaces, iptables chains, cgroups, shim processes) is undone
// by Cleanup.
package realnode

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/ociimage"
)

// Host programs the real node needs from Debian's packages; `go run
// mage.go deps:realnode` (and CI) install them.
var (
	HostPackages = []string{"runc", "containernetworking-plugins", "busybox-static", "iptables"}
	Runc         = "/usr/sbin/runc"
	CNIBinDir    = "/usr/lib/cni"
	Busybox      = "/bin/busybox"
)

// Images every real node gets. The pause image also answers to the
// reference the scenarios use, so that they run unchanged on a real node.
const (
	PauseImage   = "dralab.dev/pause:1.0"
	BusyboxImage = "dralab.dev/busybox:1.35"
	// ScenarioPauseImage is the pause image scenarios' pods name.
	ScenarioPauseImage = "registry.k8s.io/pause:3.10"
)

// BridgeName is the CNI bridge of the real node.
const BridgeName = "dralab0"

// Paths of a real node, all under its node directory.
type Paths struct {
	Node labstate.NodeDir
}

func (p Paths) join(elem ...string) string {
	return filepath.Join(append([]string{string(p.Node)}, elem...)...)
}

// ContainerdRoot, ContainerdState and ContainerdSocket are containerd's.
func (p Paths) ContainerdRoot() string   { return p.join("containerd", "root") }
func (p Paths) ContainerdState() string  { return p.join("containerd", "state") }
func (p Paths) ContainerdSocket() string { return p.join("containerd", "containerd.sock") }
func (p Paths) ContainerdConfig() string { return p.join("containerd", "config.toml") }

// CNIConfDir holds the node's CNI network configuration; CNIState the
// host-local IPAM allocations.
func (p Paths) CNIConfDir() string { return p.join("cni", "net.d") }
func (p Paths) CNIState() string   { return p.join("cni", "ipam") }

// Images holds the image archives imported into containerd.
func (p Paths) Images() string { return p.join("images") }

// KubeletConfig is the kubelet's configuration file.
func (p Paths) KubeletConfig() string { return p.join("kubelet-config.yaml") }

const containerdConfig = `version = 3
root = {{ q .Root }}
state = {{ q .State }}
disabled_plugins = [
  'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.erofs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.differ.v1.erofs', 'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.server.v1.grpc-tcp', 'io.containerd.tracing.processor.v1.otlp',
]

[grpc]
  address = {{ q .Socket }}

[ttrpc]
  address = {{ q (print .Socket ".ttrpc") }}

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = {{ q .Snapshotter }}
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = {{ q .PauseImage }}

  [plugins.'io.containerd.cri.v1.runtime']
    # These VMs lack CAP_SYS_RESOURCE: never raise a container's OOM score
    # adjustment above containerd's own.
    restrict_oom_score_adj = true
    # The driver writes CDI specs here; CDI is on by default in containerd 2.
    cdi_spec_dirs = [{{ q .CDIDir }}]
    # Network namespaces under the state directory, not /run/netns, so
    # that nothing of the lab is left outside it.
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = {{ q .Runc }}
          Root = {{ q .RuncRoot }}
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{{ q .CNIBinDir }}]
      conf_dir = {{ q .CNIConfDir }}

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`

const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "dralab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": {{ q .Bridge }},
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": {{ q .IPAMDir }},
        "ranges": [[{"subnet": "10.244.0.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {{ .Port }}
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: {{ q .CACert }}}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
# Pods' cgroups lie under the lab's own root, which the lab created and
# removes: never under another kubelet's kubepods.
cgroupRoot: {{ q .CgroupRoot }}
# These VMs run cgroup v1, deprecated since Kubernetes 1.35.
failCgroupV1: false
containerRuntimeEndpoint: {{ q (print "unix://" .Socket) }}
imageServiceEndpoint: {{ q (print "unix://" .Socket) }}
podLogsDir: {{ q .PodLogs }}
resolvConf: /etc/resolv.conf
registerNode: true
nodeStatusUpdateFrequency: 2s
# A pod whose claim the driver cannot prepare yet (its device still held by
# a claim the kubelet has not unprepared) is retried at this period; the
# default, a minute, makes a freed GPU look stuck.
syncFrequency: 10s
imageGCHighThresholdPercent: 100
evictionHard: {}
failSwapOn: false
serializeImagePulls: false
`

func render(tmpl string, data any) ([]byte, error) {
	t, err := template.New("").Funcs(template.FuncMap{"q": quote}).Parse(tmpl)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// quote writes a string as a TOML/JSON/YAML double-quoted string.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// Config is what the node's files are rendered from.
type Config struct {
	Paths       Paths
	CACert      string
	KubeletPort int
	// Snapshotter is overlayfs where the kernel allows it, else native.
	Snapshotter string
	// CgroupRoot is the kubelet's --cgroup-root (see CgroupRoot).
	CgroupRoot string
}

// WriteFiles writes containerd's, CNI's and the kubelet's configuration and
// builds the node's image archives.
func WriteFiles(c Config) error {
	p := c.Paths
	for _, d := range []string{p.ContainerdRoot(), p.ContainerdState(), p.CNIConfDir(), p.CNIState(), p.Images(), p.Node.CDI(), p.Node.KubeletRoot()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	files := []struct {
		path, tmpl string
		data       any
	}{
		{p.ContainerdConfig(), containerdConfig, map[string]string{
			"Root": p.ContainerdRoot(), "State": p.ContainerdState(), "Socket": p.ContainerdSocket(),
			"Snapshotter": c.Snapshotter, "PauseImage": PauseImage, "CDIDir": p.Node.CDI(),
			"Runc": Runc, "RuncRoot": p.RuncRoot(), "CNIBinDir": CNIBinDir, "CNIConfDir": p.CNIConfDir(),
		}},
		{filepath.Join(p.CNIConfDir(), "10-dralab.conflist"), cniConfig, map[string]string{"Bridge": BridgeName, "IPAMDir": p.CNIState()}},
	}
	for _, f := range files {
		data, err := render(f.tmpl, f.data)
		if err != nil {
			return fmt.Errorf("rendering %s: %w", f.path, err)
		}
		if err := os.WriteFile(f.path, data, 0o600); err != nil {
			return err
		}
	}
	if err := WriteKubeletConfig(c); err != nil {
		return err
	}
	for name, img := range images() {
		if err := img.WriteArchive(filepath.Join(p.Images(), name+".tar")); err != nil {
			return err
		}
	}
	return nil
}

// WriteKubeletConfig writes the kubelet's configuration; again, with
// another port, when its port was taken.
func WriteKubeletConfig(c Config) error {
	p := c.Paths
	data, err := render(kubeletConfig, map[string]any{
		"Port": c.KubeletPort, "CACert": c.CACert, "Socket": p.ContainerdSocket(), "PodLogs": filepath.Join(string(p.Node), "pod-logs"),
		"CgroupRoot": c.CgroupRoot,
	})
	if err != nil {
		return fmt.Errorf("rendering %s: %w", p.KubeletConfig(), err)
	}
	return os.WriteFile(p.KubeletConfig(), data, 0o600)
}

// images are the node's images, from Debian's busybox-static.
func images() map[string]*ociimage.Image {
	tools := map[string]string{}
	for _, t := range []string{"sh", "env", "cat", "sleep", "ls", "echo", "true", "printenv"} {
		tools["/bin/"+t] = "busybox"
	}
	return map[string]*ociimage.Image{
		// The sandbox: sleeps until told to stop.
		"pause": ociimage.Pause(Busybox, PauseImage, ScenarioPauseImage),
		"busybox": {
			Names:    []string{BusyboxImage},
			Files:    map[string]string{"/bin/busybox": Busybox},
			Symlinks: tools,
			Cmd:      []string{"/bin/sh"},
			Env:      []string{"PATH=/bin"},
		},
	}
}

// MissingHostPrograms lists the host programs the real node needs and lacks.
func MissingHostPrograms() []string {
	var missing []string
	for _, f := range []string{Runc, filepath.Join(CNIBinDir, "bridge"), filepath.Join(CNIBinDir, "host-local"), filepath.Join(CNIBinDir, "loopback"), Busybox} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	// The node's images run the host's busybox with no library beside
	// it: Debian's busybox (dynamically linked) is no busybox-static.
	if _, err := os.Stat(Busybox); err == nil && ociimage.CheckStatic(Busybox) != nil {
		missing = append(missing, Busybox+" (statically linked: Debian's busybox-static)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		missing = append(missing, "iptables")
	}
	return missing
}
