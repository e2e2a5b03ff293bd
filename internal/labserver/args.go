package labserver

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab/config"
)

// nodeArgs runs a hollow node.
func nodeArgs(dir labstate.Dir, n config.Node, caCert, gates string, verbosity int) ([]string, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"node",
		"--state-dir=" + string(dir),
		"--name=" + n.Name,
		"--port=" + strconv.Itoa(port),
		"--ca-cert=" + caCert,
		"--v=" + strconv.Itoa(verbosity),
	}
	if gates != "" {
		args = append(args, "--feature-gates="+gates)
	}
	if m := n.MemoryBytes(); m > 0 {
		args = append(args, "--memory="+strconv.FormatInt(m, 10))
	}
	if n.CPUs != nil {
		args = append(args, "--cpus="+strconv.Itoa(n.CPUs.Complexes*n.CPUs.CPUsPerComplex))
	}
	for k, v := range nodeLabels(n) {
		args = append(args, "--label="+k+"="+v)
	}
	return args, nil
}

// driverArgs runs the GPU driver of a node, with its ServiceAccount token
// bound to the node (driveraccess.go): what its chart grants a DaemonSet.
//
// hostMemoryOverhead (the lab's DRANodeAllocatableResources gate) has fake
// GPUs served through DRA publish their profile's host-memory overhead.
//
// partitionTypes (the lab's DRAPartitionableDevicesType gate) has
// partitioned or time-sliced fake GPUs name their partition types.
func driverArgs(dir labstate.Dir, n config.Node, hostMemoryOverhead, partitionTypes bool, verbosity int) []string {
	nd := dir.Node(n.Name)
	inventory := []string{"--inventory=fake", "--profile=" + n.GPUs.Profile, "--gpus=" + strconv.Itoa(n.GPUs.Count)}
	if p := n.GPUs.Partitioning; p != "" {
		inventory = append(inventory, "--partitioning="+p)
	}
	if sh := n.GPUs.Sharing; sh != "" {
		inventory = append(inventory, "--sharing="+sh)
	}
	if a := n.GPUs.Attach; a != "" {
		inventory = append(inventory, "--attach="+a)
	}
	if ts := n.GPUs.TimeSlices; ts > 0 {
		inventory = append(inventory, "--time-slices="+strconv.Itoa(ts))
	}
	if hostMemoryOverhead && n.GPUs.Mode != config.GPUModeDevicePlugin {
		inventory = append(inventory, "--host-memory-overhead")
	}
	if partitionTypes && (n.GPUs.Partitioning != "" || n.GPUs.TimeSlices > 0) {
		inventory = append(inventory, "--partition-types")
	}
	if n.GPUs.NVML != "" {
		inventory = []string{"--inventory=nvml", "--nvml=" + nvml.SourceOf(n.GPUs.NVML)}
	}
	if n.GPUs.DeviceMetadata {
		inventory = append(inventory, "--device-metadata")
	}
	if t := n.Topology; t != nil {
		if t.Rack != "" {
			inventory = append(inventory, "--rack="+t.Rack)
		}
		if t.NVLinkDomain != "" {
			inventory = append(inventory, "--nvlink-domain="+t.NVLinkDomain)
		}
	}
	return append(inventory,
		"--node-name="+n.Name,
		"--kubeconfig="+nd.DriverKubeconfig(),
		"--mode="+n.GPUs.Mode,
		"--kubelet-registrar-dir="+nd.PluginsRegistry(),
		"--kubelet-plugins-dir="+nd.Plugins(),
		"--kubelet-device-plugins-dir="+devicePluginsDir(n, nd),
		"--cdi-dir="+nd.CDI(),
		"--checkpoint-dir="+nd.DriverCheckpoint(),
		"--faults-file="+nd.GPUFaults(),
		"--v="+strconv.Itoa(verbosity),
	)
}

// nicDriverArgs runs the NIC driver of a node (`dralab-driver nic`), with
// its own ServiceAccount token and checkpoint, and the node's place.
func nicDriverArgs(dir labstate.Dir, n config.Node, verbosity int) []string {
	nd := dir.Node(n.Name)
	args := []string{"nic",
		"--profile=" + n.NICs.Profile, "--nics=" + strconv.Itoa(n.NICs.Count),
		"--node-name=" + n.Name,
		"--kubeconfig=" + nd.NICDriverKubeconfig(),
		"--kubelet-registrar-dir=" + nd.PluginsRegistry(),
		"--kubelet-plugins-dir=" + nd.Plugins(),
		"--cdi-dir=" + nd.CDI(),
		"--checkpoint-dir=" + nd.NICDriverCheckpoint(),
		"--v=" + strconv.Itoa(verbosity),
	}
	if n.NICs.SkipNodeOperations {
		args = append(args, "--skip-node-operations")
	}
	if n.NICs.NUMANodeList {
		args = append(args, "--numa-list")
	}
	if n.Kind == config.NodeReal {
		// Its containers are real: each gets a real interface per NIC.
		args = append(args, "--attach-interfaces")
	}
	if t := n.Topology; t != nil {
		if t.Rack != "" {
			args = append(args, "--rack="+t.Rack)
		}
		if t.NVLinkDomain != "" {
			args = append(args, "--nvlink-domain="+t.NVLinkDomain)
		}
	}
	return args
}

// nicDriver is the NIC driver's process of a node, and gpuDriver the
// GPU driver's: each serves its metrics on a free loopback port that it
// records in the node's NICDriverMetrics or DriverMetrics file (another
// one if the port was taken before it bound it), so that lab:metrics and
// the tests read its prepare calls.
func nicDriver(dir labstate.Dir, n config.Node, verbosity int) (*process, error) {
	return withMetrics(labstate.RoleNICDriver, n, dir.Node(n.Name).NICDriverMetrics(), func() []string { return nicDriverArgs(dir, n, verbosity) })
}

// cpuDriver is the CPU driver's process of a node (`dralab-driver cpu`).
func cpuDriver(dir labstate.Dir, n config.Node, verbosity int) (*process, error) {
	return withMetrics(labstate.RoleCPUDriver, n, dir.Node(n.Name).CPUDriverMetrics(), func() []string { return cpuDriverArgs(dir, n, verbosity) })
}

// cpuDriverArgs runs the CPU driver of a node, with its own ServiceAccount
// token and checkpoint.
func cpuDriverArgs(dir labstate.Dir, n config.Node, verbosity int) []string {
	nd := dir.Node(n.Name)
	return []string{"cpu",
		"--complexes=" + strconv.Itoa(n.CPUs.Complexes), "--cpus-per-complex=" + strconv.Itoa(n.CPUs.CPUsPerComplex),
		"--node-name=" + n.Name,
		"--kubeconfig=" + nd.CPUDriverKubeconfig(),
		"--kubelet-registrar-dir=" + nd.PluginsRegistry(),
		"--kubelet-plugins-dir=" + nd.Plugins(),
		"--cdi-dir=" + nd.CDI(),
		"--checkpoint-dir=" + nd.CPUDriverCheckpoint(),
		"--v=" + strconv.Itoa(verbosity),
	}
}

func gpuDriver(dir labstate.Dir, n config.Node, hostMemoryOverhead, partitionTypes bool, verbosity int) (*process, error) {
	return withMetrics(labstate.RoleDriver, n, dir.Node(n.Name).DriverMetrics(), func() []string {
		return driverArgs(dir, n, hostMemoryOverhead, partitionTypes, verbosity)
	})
}

func withMetrics(role string, n config.Node, file string, driverArgs func() []string) (*process, error) {
	args := func() ([]string, []string, error) {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := atomicfile.Write(file, []byte(address+"\n"), 0o600); err != nil {
			return nil, nil, err
		}
		return append(driverArgs(), "--metrics-address="+address), nil, nil
	}
	first, _, err := args()
	if err != nil {
		return nil, err
	}
	return &process{role: role, node: n.Name, args: first, restart: true, rebind: args}, nil
}

// outsideDriver runs a configured outside driver's kubelet plugin on a
// node, with the node's credentials, directories and ports in its
// placeholders. Nodes share the host's network namespace: each gets its
// own free loopback ports, and others if one was taken before the plugin
// bound it.
func outsideDriver(dir labstate.Dir, d *config.Driver, n config.Node) (*process, error) {
	nd := dir.Node(n.Name)
	pluginDir := filepath.Join(nd.Plugins(), d.Name)
	for _, dir := range []string{pluginDir, nd.DriverCheckpoint(), nd.CDI()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
	}
	expand := func() ([]string, []string, error) {
		values := map[string]string{
			"{nodeName}":     n.Name,
			"{kubeconfig}":   nd.DriverKubeconfig(),
			"{registrarDir}": nd.PluginsRegistry(),
			"{pluginDir}":    pluginDir,
			"{pluginsDir}":   nd.Plugins(),
			"{cdiDir}":       nd.CDI(),
			"{stateDir}":     nd.DriverCheckpoint(),
		}
		for _, name := range d.PortNames() {
			port, err := freePort()
			if err != nil {
				return nil, nil, err
			}
			values[config.PortPlaceholder(name)] = strconv.Itoa(port)
		}
		command, extra := d.Expand(values)
		env := os.Environ()
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			env = append(env, k+"="+extra[k])
		}
		return command, env, nil
	}
	command, env, err := expand()
	if err != nil {
		return nil, err
	}
	return &process{role: labstate.RoleDriver, node: n.Name, bin: command[0], args: command[1:], env: env, restart: true,
		rebind: func() ([]string, []string, error) {
			command, env, err := expand()
			if err != nil {
				return nil, nil, err
			}
			return command[1:], env, nil
		}}, nil
}

// nodeLabels are the labels a node registers with: its configured labels
// and, for a GPU node, its GPU profile and how its GPUs are served (as a
// kind node of the lab is labelled).
func nodeLabels(n config.Node) map[string]string {
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	maps.Copy(labels, n.Topology.Labels())
	if n.GPUs != nil && n.GPUs.Profile != "" {
		labels[gpu.NodeProfileLabel] = n.GPUs.Profile
	}
	if n.GPUs != nil && n.GPUs.Mode != "" {
		labels[gpu.NodeModeLabel] = n.GPUs.Mode
	}
	if n.GPUs != nil && n.GPUs.DeviceMetadata {
		labels[gpu.NodeDeviceMetadataLabel] = "true"
	}
	return labels
}

// devicePluginsDir is where a node's kubelet serves the device-plugin
// Registration service: a fixed host path for the real kubelet.
func devicePluginsDir(n config.Node, nd labstate.NodeDir) string {
	if n.Kind == config.NodeReal {
		return realnode.DevicePluginsDir
	}
	return nd.DevicePlugins()
}
