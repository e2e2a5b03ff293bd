package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/lab/config"
)

// nodesReadyTimeout bounds the wait for a broken lab; a warm one is Ready
// in seconds.
const nodesReadyTimeout = 2 * time.Minute

// SameName maps a cluster node to the lab node of the same name.
func SameName(n *v1.Node) string { return n.Name }

// NodeReady is a node's Ready condition.
func NodeReady(n *v1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return string(c.Status)
		}
	}
	return string(v1.ConditionUnknown)
}

// Log components: where to read why a node is not ready.
const (
	// LogNode is the node's (kubelet's) log.
	LogNode = "node"
	// LogDriver is the log of the node's DRA driver (plugin).
	LogDriver = "driver"
	// LogNICDriver is the log of the node's NIC driver.
	LogNICDriver = "nic-driver"
	// LogCPUDriver is the log of the node's CPU driver.
	LogCPUDriver = "cpu-driver"
)

// WaitReady waits until every configured node is registered and
// Ready and its GPUs are published: as ResourceSlices of the GPU driver for
// DRA nodes, as allocatable extended resources for device-plugin nodes;
// and its NICs and CPU complexes, as ResourceSlices of their drivers.
// logOf names the log of a node's component (LogNode, LogDriver) that
// explains what is missing.
func WaitReady(ctx context.Context, kubeconfig string, cfg *config.Config, labNode func(*v1.Node) string, logOf func(node, component string) string) error {
	return WaitReadySince(ctx, kubeconfig, cfg, time.Time{}, labNode, logOf)
}

// WaitReadySince is WaitReady for a cluster whose nodes may carry an old
// Ready condition (a lab resumed on its etcd data): a node counts only once
// its kubelet has reported its status at or after since.
func WaitReadySince(ctx context.Context, kubeconfig string, cfg *config.Config, since time.Time, labNode func(*v1.Node) string, logOf func(node, component string) string) error {
	client, err := kubeclient.New(kubeconfig)
	if err != nil {
		return err
	}
	missing := map[string]notReady{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodesReadyTimeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		sliceList, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		missing = nodesNotReady(cfg, nodes.Items, sliceList.Items, since, labNode)
		return len(missing) == 0, nil
	})
	if err != nil {
		var msgs []string
		for name, why := range missing {
			component := LogNode
			switch {
			case why.cpuDriver:
				component = LogCPUDriver
			case why.nicDriver:
				component = LogNICDriver
			case why.driver:
				component = LogDriver
			}
			msgs = append(msgs, fmt.Sprintf("node %s %s (log: %s)", name, why.why, logOf(name, component)))
		}
		slices.Sort(msgs)
		return fmt.Errorf("waiting for nodes: %w: %s", err, strings.Join(msgs, "; "))
	}
	return nil
}

// notReady is what a node lacks, and whether its driver (or its NIC or
// CPU driver) is to explain.
type notReady struct {
	why       string
	driver    bool
	nicDriver bool
	cpuDriver bool
}

// nodesNotReady says, per configured node, what it still lacks.
func nodesNotReady(cfg *config.Config, nodes []v1.Node, rs []resourceapi.ResourceSlice, since time.Time, labNode func(*v1.Node) string) map[string]notReady {
	byName := map[string]*v1.Node{}
	// published counts a node's devices; whole counts its whole GPUs, as a
	// partitioned GPU is published with its MIG devices beside it; kept
	// counts the whole GPUs that are as the node's configuration promises
	// (partitioned, shared, fabric-attached), parts its MIG devices,
	// slicesOf its time-sliced shares.
	published, whole, kept, parts, slicesOf := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	gpusOf := map[string]*config.GPUs{}
	for _, n := range cfg.Nodes {
		gpusOf[n.Name] = n.GPUs
	}
	for i := range nodes {
		byName[labNode(&nodes[i])] = &nodes[i]
	}
	driver := gpu.DriverName
	if cfg.Driver != nil {
		driver = cfg.Driver.Name
	}
	complete := completeNodes(driver, rs)
	completeNICs, completeCPUs := completeNodes(fakenic.DriverName, rs), completeNodes(fakecpu.DriverName, rs)
	nics, complexes := map[string]int{}, map[string]int{}
	for _, s := range rs {
		var count map[string]int
		switch s.Spec.Driver {
		case fakenic.DriverName:
			count = nics
		case fakecpu.DriverName:
			count = complexes
		default:
			continue
		}
		for name, n := range byName {
			if n.Name == s.Spec.Pool.Name {
				count[name] += len(s.Spec.Devices)
			}
		}
	}
	for _, s := range rs {
		if s.Spec.Driver != driver {
			continue
		}
		for name, n := range byName {
			if n.Name == s.Spec.Pool.Name {
				published[name] += len(s.Spec.Devices)
				for _, d := range s.Spec.Devices {
					switch t := ptr.Deref(d.Attributes[gpu.AttrType].StringValue, ""); t {
					case gpu.TypeGPU:
						whole[name]++
						if promised(gpusOf[name], d) {
							kept[name]++
						}
					case gpu.TypeMIG:
						parts[name]++
					case gpu.TypeTimeSlice:
						slicesOf[name]++
					}
				}
			}
		}
	}
	missing := map[string]notReady{}
	for _, n := range cfg.Nodes {
		node, ok := byName[n.Name]
		switch {
		case !ok:
			missing[n.Name] = notReady{why: "is not registered"}
		case NodeReady(node) != string(v1.ConditionTrue):
			missing[n.Name] = notReady{why: "is not Ready"}
		case reportedBefore(node, since):
			missing[n.Name] = notReady{why: "has not reported its status since the lab started"}
		case cfg.Driver != nil:
			// An outside driver's devices are its own to describe: the
			// node is ready once it publishes one.
			if published[n.Name] == 0 {
				missing[n.Name] = notReady{why: fmt.Sprintf("publishes no device of %s yet", driver), driver: true}
			} else if !complete[node.Name] {
				missing[n.Name] = notReady{why: fmt.Sprintf("has published only some of the ResourceSlices of its %s pool", driver), driver: true}
			}
		case n.GPUs == nil:
		case n.GPUs.NVML != "":
			// NVML says how many GPUs there are.
			q := node.Status.Allocatable[v1.ResourceName(gpu.ExtendedResource)]
			if (n.GPUs.Mode == config.GPUModeDRA && published[n.Name] == 0) || (n.GPUs.Mode == config.GPUModeDevicePlugin && q.Value() == 0) {
				missing[n.Name] = notReady{why: fmt.Sprintf("has no GPUs from NVML (%s) yet", n.GPUs.NVML), driver: true}
			} else if n.GPUs.Mode == config.GPUModeDRA && !complete[node.Name] {
				missing[n.Name] = notReady{why: fmt.Sprintf("has published only some of its ResourceSlices of GPUs from NVML (%s)", n.GPUs.NVML), driver: true}
			}
		case n.GPUs.Mode == config.GPUModeDRA && (whole[n.Name] != n.GPUs.Count || !complete[node.Name]):
			missing[n.Name] = notReady{why: fmt.Sprintf("has %d of its %d GPUs in ResourceSlices", whole[n.Name], n.GPUs.Count), driver: true}
		case n.GPUs.Mode == config.GPUModeDRA && (kept[n.Name] != n.GPUs.Count || n.GPUs.Partitioning == config.PartitioningMIG && parts[n.Name] == 0 || slicesOf[n.Name] != n.GPUs.Count*n.GPUs.TimeSlices):
			missing[n.Name] = notReady{why: fmt.Sprintf("has %d of its %d GPUs published as its configuration says (%s), with %d MIG devices and %d of %d time-sliced shares", kept[n.Name], n.GPUs.Count, promises(n.GPUs), parts[n.Name], slicesOf[n.Name], n.GPUs.Count*n.GPUs.TimeSlices), driver: true}
		case n.GPUs.Mode == config.GPUModeDevicePlugin:
			q := node.Status.Allocatable[v1.ResourceName(gpu.ExtendedResource)]
			if q.Value() != int64(n.GPUs.Count) {
				missing[n.Name] = notReady{why: fmt.Sprintf("has %d of its %d GPUs allocatable as %s", q.Value(), n.GPUs.Count, gpu.ExtendedResource), driver: true}
			}
		}
		if _, gpusMissing := missing[n.Name]; !gpusMissing && ok && n.NICs != nil && (nics[n.Name] != n.NICs.Count || !completeNICs[node.Name]) {
			missing[n.Name] = notReady{why: fmt.Sprintf("has %d of its %d NICs in ResourceSlices", nics[n.Name], n.NICs.Count), nicDriver: true}
		}
		if _, gpusMissing := missing[n.Name]; !gpusMissing && ok && n.CPUs != nil && (complexes[n.Name] != n.CPUs.Complexes || !completeCPUs[node.Name]) {
			missing[n.Name] = notReady{why: fmt.Sprintf("has %d of its %d CPU complexes in ResourceSlices", complexes[n.Name], n.CPUs.Complexes), cpuDriver: true}
		}
	}
	return missing
}

// reportedBefore tells whether the node's last Ready heartbeat is older
// than since (whose sub-second part the API's timestamps do not keep).
func reportedBefore(n *v1.Node, since time.Time) bool {
	if since.IsZero() {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
		}
	}
	return true
}

// completeNodes says, by node name, whether the driver's pools of the node
// are published whole: for each, the slices of its newest generation are
// as many as they say the pool has. A pool of several slices (a partitioned
// node's counter sets and MIG devices) is published one slice at a time.
func completeNodes(driver string, rs []resourceapi.ResourceSlice) map[string]bool {
	type pool struct {
		node        string
		gen         int64
		have, count int64
	}
	pools := map[string]*pool{}
	for _, s := range rs {
		if s.Spec.Driver != driver || s.Spec.NodeName == nil {
			continue
		}
		p := pools[s.Spec.Pool.Name]
		switch {
		case p == nil || s.Spec.Pool.Generation > p.gen:
			pools[s.Spec.Pool.Name] = &pool{node: *s.Spec.NodeName, gen: s.Spec.Pool.Generation, have: 1, count: s.Spec.Pool.ResourceSliceCount}
		case s.Spec.Pool.Generation == p.gen:
			p.have++
		}
	}
	out := map[string]bool{}
	for _, p := range pools {
		done, seen := out[p.node]
		out[p.node] = (done || !seen) && p.have == p.count
	}
	return out
}

// promised reports whether a whole GPU is published as the node's GPUs
// promise: consuming its counters when partitioned, allowing several
// allocations when shared, with binding conditions when fabric-attached.
// A lab that is Ready then has every device its scenarios require, so a
// driver that stops publishing them fails lab:up rather than skip them.
func promised(g *config.GPUs, d resourceapi.Device) bool {
	if g == nil {
		return true
	}
	return (g.Partitioning != config.PartitioningMIG && g.TimeSlices == 0 || len(d.ConsumesCounters) > 0) &&
		(g.Sharing != config.SharingMemory || ptr.Deref(d.AllowMultipleAllocations, false)) &&
		(g.Attach != config.AttachFabric || len(d.BindingConditions) > 0)
}

// promises says what promised checks, in the configuration's words.
func promises(g *config.GPUs) string {
	var out []string
	if g.Partitioning != "" {
		out = append(out, "partitioning: "+g.Partitioning)
	}
	if g.Sharing != "" {
		out = append(out, "sharing: "+g.Sharing)
	}
	if g.Attach != "" {
		out = append(out, "attach: "+g.Attach)
	}
	if g.TimeSlices > 0 {
		out = append(out, fmt.Sprintf("timeSlices: %d", g.TimeSlices))
	}
	if len(out) == 0 {
		return "whole GPUs"
	}
	return strings.Join(out, ", ")
}
