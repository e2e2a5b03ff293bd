package labserver

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// nodeArgs runs a hollow node.
func nodeArgs(dir labstate.Dir, cfg *config.Config, n config.Node, caCert, gates string, verbosity int) ([]string, error) {
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
	if c := n.LogicalCPUs(); c > 0 {
		args = append(args, "--cpus="+strconv.Itoa(c))
	}
	for k, v := range nodedrivers.Labels(cfg, n) {
		args = append(args, "--label="+k+"="+v)
	}
	for _, t := range n.TaintStrings() {
		args = append(args, "--taint="+t)
	}
	return args, nil
}

// driverProcess is the process of a kind's driver on node n: dralab-driver
// with the kind's arguments, its ServiceAccount token bound to the node
// (driveraccess.go). It serves its metrics on a free loopback port that it
// records in its metrics file (another one if the port was taken before
// it bound it), so that lab:metrics and the tests read its prepare calls.
func driverProcess(dir labstate.Dir, cfg *config.Config, k nodedrivers.Kind, n config.Node, verbosity int) (*process, error) {
	nd := dir.Node(n.Name)
	return withMetrics(k.Role(), n, nd.Driver(k.Role()).Metrics, func() []string { return k.Args(nd, cfg, n, verbosity) })
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
	files := nd.Driver(labstate.RoleDriver)
	for _, dir := range []string{pluginDir, files.Checkpoint, nd.CDI()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
	}
	expand := func() ([]string, []string, error) {
		values := map[string]string{
			"{nodeName}":     n.Name,
			"{kubeconfig}":   files.Kubeconfig,
			"{registrarDir}": nd.PluginsRegistry(),
			"{pluginDir}":    pluginDir,
			"{pluginsDir}":   nd.Plugins(),
			"{cdiDir}":       nd.CDI(),
			"{stateDir}":     files.Checkpoint,
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
