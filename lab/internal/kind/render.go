// Package kind is the kind backend: the same lab configuration as a kind
// cluster, created through the sigs.k8s.io/kind Go library (never a kind
// binary), with the GPU driver's image loaded into the nodes and its Helm
// chart installed through the Helm Go SDK. It needs a Docker (or Podman)
// engine that can run privileged containers.
package kind

import (
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/kind/nodeimage"
)

// NodeImage is the node image a kind lab runs unless its configuration
// names another (config.KindNodeImage).
const NodeImage = config.KindNodeImage

// LabelLabNode names the lab node a kind worker stands for: kind chooses
// the workers' own names. Each worker also carries its lab node's labels
// (nodedrivers.Labels), which the driver releases select and read.
const LabelLabNode = config.LabelLabNode

// FeatureGates are the DRA features the scenarios rely on. Every one is on
// by default in 1.37. RenderFor pins those whose default could still change;
// a gate Kubernetes locks to its default (DynamicResourceAllocation,
// DRAPrioritizedList, DRAAdminAccess and DRAExtendedResource in 1.37) is
// left out, since naming it does nothing until the release that removes
// it, where kubeadm's components refuse to start (1.38 removes
// DynamicResourceAllocation).
var FeatureGates = []string{
	"DynamicResourceAllocation",
	"DRAPrioritizedList",
	"DRAAdminAccess",
	"DRADeviceTaints",
	"DRADeviceTaintRules",
	"DRAExtendedResource",
}

// cdiPatch makes containerd read the driver's CDI specs. kind writes a
// version-2 containerd configuration, whose CRI plugin key is
// io.containerd.grpc.v1.cri; CDI is on by default in containerd 2, the
// directory is what matters.
const cdiPatch = `[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/var/run/cdi"]
`

// RenderFor turns a lab configuration into kind's cluster configuration: a
// control plane and one worker per lab node, labelled with its GPUs, on a
// host that lacks what host says (cgroup v2, CAP_SYS_RESOURCE).
func RenderFor(cfg *config.Config, host Host) (*v1alpha4.Cluster, error) {
	if cfg.Driver != nil {
		return nil, fmt.Errorf("lab %s: driver: an outside driver runs as a host process of the embedded lab; on kind, deploy it with its own chart", cfg.Name)
	}
	hostGPUs := -1
	for i, n := range cfg.Nodes {
		if n.GPUs == nil || n.GPUs.NVML != config.NVMLHost {
			continue
		}
		switch {
		case hostGPUs >= 0:
			return nil, fmt.Errorf("lab %s: nodes[%d].gpus.nvml: nodes[%d] has the host's GPUs already: on kind, one node has them (two would publish the same GPUs)", cfg.Name, i, hostGPUs)
		case host.NVIDIA == nil:
			why := "no NVIDIA driver found"
			if host.noNVIDIA != nil {
				why = host.noNVIDIA.Error()
			}
			return nil, fmt.Errorf("lab %s: nodes[%d].gpus.nvml: host: %s; without GPUs, give a go-nvml mock server (mock:<server>) or fake profiles", cfg.Name, i, why)
		}
		hostGPUs = i
	}
	c := &v1alpha4.Cluster{
		TypeMeta:                v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:                    cfg.Name,
		FeatureGates:            map[string]bool{},
		RuntimeConfig:           map[string]string{"resource.k8s.io/v1": "true"},
		ContainerdConfigPatches: []string{cdiPatch},
		Nodes:                   []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole, Image: nodeImage(cfg)}},
	}
	for _, g := range FeatureGates {
		if !config.GateLocked(g) {
			c.FeatureGates[g] = true
		}
	}
	// The lab's own, which kind gives every component of every node.
	maps.Copy(c.FeatureGates, cfg.FeatureGates)
	maps.Copy(c.RuntimeConfig, cfg.RuntimeConfig)
	if cfg.APIServerPort != 0 {
		c.Networking.APIServerPort = int32(cfg.APIServerPort)
	}
	c.Networking.APIServerAddress = "127.0.0.1"
	for _, n := range cfg.Nodes {
		// The labels an embedded node registers with, and the lab node's
		// name: kind chooses the workers' own.
		w := v1alpha4.Node{Role: v1alpha4.WorkerRole, Image: nodeImage(cfg), Labels: nodedrivers.Labels(cfg, n)}
		w.Labels[LabelLabNode] = n.Name
		if len(n.Taints) > 0 {
			// kind's nodes have no taints of their own: kubeadm registers
			// the worker with them as it joins.
			patch, err := joinTaints(n.NodeTaints())
			if err != nil {
				return nil, err
			}
			w.KubeadmConfigPatches = append(w.KubeadmConfigPatches, patch)
		}
		if n.GPUs != nil && n.GPUs.NVML == config.NVMLHost {
			// The host's GPUs: their device files in the node, whose
			// privileged driver pod and whose claims' containers (through
			// the driver's CDI specs) get them; the NVML library under the
			// driver root the chart's release names.
			w.ExtraMounts = host.NVIDIA.mounts()
		}
		c.Nodes = append(c.Nodes, w)
	}
	kubeadm, containerd, preflight := host.patches()
	var skip []string
	if nodeimage.IsLabs(nodeImage(cfg)) {
		// The lab's own image carries its network's CNI configuration and
		// no image of kindnet or CoreDNS (no scenario resolves a name).
		// Its images are imported when the node boots, before its kubelet
		// starts, but maybe after kubeadm's preflight looked for them:
		// kubeadm pulls none.
		c.Networking.DisableDefaultCNI = true
		skip = append(skip, "addon/coredns")
		preflight = append(preflight, "ImagePull")
	}
	c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, kubeadm...)
	c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, kubeadmPatches(skip, preflight)...)
	if img := nodeImage(cfg); nodeimage.IsLabs(img) || img == config.KindNodeImage {
		// Kubernetes of the lab's version: kind writes kubeadm's v1beta4,
		// whose extraArgs are a list.
		c.KubeadmConfigPatchesJSON6902 = append(c.KubeadmConfigPatchesJSON6902, schedulerMetricsPatch)
	}
	c.ContainerdConfigPatches = append(c.ContainerdConfigPatches, containerd...)
	v1alpha4.SetDefaultsCluster(c)
	return c, nil
}

// schedulerMetricsPatch has kubeadm start the scheduler so that the API
// server's proxy reaches its /metrics (lab:metrics, the scenarios' reports):
// listening on the node's address, not on 127.0.0.1 alone, and serving
// /metrics to a request without credentials (the proxy sends none), beside
// the health paths it serves so already. The node's address is the kind
// network's, which only the lab's nodes and the host reach.
var schedulerMetricsPatch = v1alpha4.PatchJSON6902{Group: "kubeadm.k8s.io", Version: "v1beta4", Kind: "ClusterConfiguration", Patch: `- op: add
  path: /scheduler/extraArgs/-
  value: {name: bind-address, value: 0.0.0.0}
- op: add
  path: /scheduler/extraArgs/-
  value: {name: authorization-always-allow-paths, value: "/healthz,/readyz,/livez,/metrics"}
`}

// kubeadmPatches are kind's patches of kubeadm's init and join
// configurations: the phases init skips and the preflight checks both
// ignore, each configuration in one patch (a second patch of the same
// list would replace the first's).
func kubeadmPatches(skipPhases, ignorePreflight []string) []string {
	var out []string
	patch := func(kind string, fields map[string]any) {
		fields["kind"] = kind
		data, err := yaml.Marshal(fields)
		if err != nil {
			panic(err) // maps of strings and string lists always marshal
		}
		out = append(out, string(data))
	}
	if len(skipPhases) > 0 || len(ignorePreflight) > 0 {
		init := map[string]any{}
		if len(skipPhases) > 0 {
			init["skipPhases"] = skipPhases
		}
		if len(ignorePreflight) > 0 {
			init["nodeRegistration"] = map[string]any{"ignorePreflightErrors": ignorePreflight}
		}
		patch("InitConfiguration", init)
	}
	if len(ignorePreflight) > 0 {
		patch("JoinConfiguration", map[string]any{"nodeRegistration": map[string]any{"ignorePreflightErrors": ignorePreflight}})
	}
	return out
}

// ChartValues are the driver chart's values for a release of the lab's
// (nodedrivers.Releases): its own, and the driver image the backend loaded
// into the nodes, never pulled.
func ChartValues(r nodedrivers.Release, image, tag string) map[string]any {
	v := maps.Clone(r.Values)
	v["image"] = map[string]any{"repository": image, "tag": tag, "pullPolicy": "Never"}
	return v
}

// nodeImage is the lab's node image.
func nodeImage(cfg *config.Config) string {
	if cfg.NodeImage != "" {
		return cfg.NodeImage
	}
	return NodeImage
}

// joinTaints is the kubeadm patch that registers a joining node with
// taints.
func joinTaints(taints []v1.Taint) (string, error) {
	patch, err := yaml.Marshal(map[string]any{"kind": "JoinConfiguration", "nodeRegistration": map[string]any{"taints": taints}})
	if err != nil {
		return "", fmt.Errorf("the kubeadm patch of node taints: %w", err)
	}
	return string(patch), nil
}
