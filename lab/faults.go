package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/natural"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
)

// ErrNoFaultInjection means the lab's backend cannot inject GPU faults.
var ErrNoFaultInjection = errors.New("this lab's backend cannot inject GPU faults")

// GPURef names a GPU of a lab: <node>/<device>, e.g. gpu-h100/gpu-0.
type GPURef struct {
	Node, Device string
}

func (r GPURef) String() string { return r.Node + "/" + r.Device }

// ParseGPURef parses <node>/<device>.
func ParseGPURef(s string) (GPURef, error) {
	node, device, ok := strings.Cut(s, "/")
	if !ok || node == "" || device == "" || strings.Contains(device, "/") {
		return GPURef{}, fmt.Errorf("GPU %q: want <node>/<device>, e.g. gpu-h100/gpu-0", s)
	}
	return GPURef{Node: node, Device: device}, nil
}

// FailGPU makes the driver of the GPU's node treat it as failed with an
// XID: it reports the GPU (and its MIG devices) Unhealthy to the kubelet
// and taints it in its ResourceSlice, with the XID's effect. It returns
// the XID's entry.
func (l *Lab) FailGPU(ctx context.Context, ref GPURef, xid int) (gpu.XID, error) {
	if xid <= 0 {
		return gpu.XID{}, fmt.Errorf("XID %d: must be positive (79: the GPU has fallen off the bus)", xid)
	}
	if err := l.updateGPUFaults(ctx, ref, func(f map[string]gpu.GPUFault) { f[ref.Device] = gpu.GPUFault{XID: xid} }); err != nil {
		return gpu.XID{}, err
	}
	return gpu.LookupXID(xid), nil
}

// HealGPU makes the driver of the GPU's node treat it as healthy again:
// its taint is removed.
func (l *Lab) HealGPU(ctx context.Context, ref GPURef) error {
	return l.updateGPUFaults(ctx, ref, func(f map[string]gpu.GPUFault) { delete(f, ref.Device) })
}

func (l *Lab) updateGPUFaults(ctx context.Context, ref GPURef, update func(map[string]gpu.GPUFault)) error {
	faulter, ok := l.backend.(backend.GPUFaulter)
	if !ok {
		return fmt.Errorf("%w (%s backend)", ErrNoFaultInjection, l.backend.Name())
	}
	labNode, err := l.checkGPU(ctx, ref)
	if err != nil {
		return err
	}
	return faulter.UpdateGPUFaults(ctx, l.cfg.Name, labNode, update)
}

// checkGPU checks that the node runs dralab's GPU driver in DRA mode and
// publishes the GPU, naming the valid choices when not, and returns the
// lab node's name. The node is the lab's name for it or the cluster's
// (what an allocation shows): they differ on kind, whose workers stand
// for the lab nodes their config.LabelLabNode names.
func (l *Lab) checkGPU(ctx context.Context, ref GPURef) (string, error) {
	client, err := kubeclient.New(l.Kubeconfig())
	if err != nil {
		return "", err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing the nodes of lab %s: %w", l.cfg.Name, err)
	}
	labNode, clusterNode := ref.Node, ref.Node
	for _, n := range nodes.Items {
		stands := n.Labels[config.LabelLabNode]
		if stands == "" {
			stands = n.Name
		}
		if n.Name == ref.Node || stands == ref.Node {
			labNode, clusterNode = stands, n.Name
		}
	}
	var faultable []string
	var node *config.Node
	for i, n := range l.cfg.Nodes {
		if n.GPUs != nil && n.GPUs.Mode == config.GPUModeDRA && l.cfg.Driver == nil {
			faultable = append(faultable, n.Name)
			if n.Name == labNode {
				node = &l.cfg.Nodes[i]
			}
		}
	}
	if node == nil {
		why := "no such node"
		for _, n := range l.cfg.Nodes {
			if n.Name == labNode {
				why = "its GPUs are not published through DRA by dralab's GPU driver"
			}
		}
		return "", fmt.Errorf("GPU %s: %s in lab %s; nodes whose GPUs can fail: %s", ref, why, l.cfg.Name, orNone(faultable))
	}
	sel := fields.Set{resourceapi.ResourceSliceSelectorDriver: gpu.DriverName, resourceapi.ResourceSliceSelectorNodeName: clusterNode}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return "", fmt.Errorf("listing the GPUs of node %s: %w", ref.Node, err)
	}
	var gpus []string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if t := d.Attributes[gpu.AttrType].StringValue; t != nil && *t == gpu.TypeGPU {
				gpus = append(gpus, d.Name)
			}
		}
	}
	if !slices.Contains(gpus, ref.Device) {
		slices.SortFunc(gpus, natural.Compare)
		return "", fmt.Errorf("GPU %s: node %s has no GPU %q; its GPUs: %s", ref, ref.Node, ref.Device, orNone(gpus))
	}
	return labNode, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// GPUFaults fails and heals the lab's GPUs by node and device name: what a
// scenario runner needs (scenarios.GPUFaulter).
type GPUFaults struct{ Lab *Lab }

// FailGPU fails a GPU with an XID.
func (f GPUFaults) FailGPU(ctx context.Context, node, device string, xid int) error {
	_, err := f.Lab.FailGPU(ctx, GPURef{Node: node, Device: device}, xid)
	return err
}

// HealGPU heals a GPU.
func (f GPUFaults) HealGPU(ctx context.Context, node, device string) error {
	return f.Lab.HealGPU(ctx, GPURef{Node: node, Device: device})
}
