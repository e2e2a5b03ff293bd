package lab

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/natural"
)

// gpuHealth reads each node's GPU health from the lab's ResourceSlices
// (gpuHealthOf), by the node's name in the cluster.
func (l *Lab) gpuHealth(ctx context.Context) (map[string]string, error) {
	client, err := kubeclient.New(l.Kubeconfig())
	if err != nil {
		return nil, err
	}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, gpu.DriverName).String()})
	if err != nil {
		return nil, fmt.Errorf("reading the GPUs' ResourceSlices: %w", err)
	}
	return gpuHealthOf(list.Items), nil
}

// gpuHealthOf says, per node, the health of the whole GPUs that dralab's
// GPU driver publishes node-local, as the driver's taints on their
// devices in each pool's newest generation say it: a GPU tainted for an
// Xid failed, one tainted unwatched has health unknown (its Xids cannot be
// watched: the driver reports it Unknown to the kubelet), any other is
// healthy. "7 healthy, 1 failed (Xid 79)".
func gpuHealthOf(list []resourceapi.ResourceSlice) map[string]string {
	type tally struct {
		healthy, failed, unknown int
		xids                     map[string]bool
	}
	nodes := map[string]*tally{}
	// The newest generation of each pool, as the allocator reads it.
	for _, s := range (&devices.State{Slices: list}).Current(gpu.DriverName, "") {
		if s.Spec.NodeName == nil {
			continue
		}
		t := nodes[*s.Spec.NodeName]
		if t == nil {
			t = &tally{xids: map[string]bool{}}
			nodes[*s.Spec.NodeName] = t
		}
		for _, d := range s.Spec.Devices {
			if _, whole := d.Attributes[gpu.AttrUUID]; !whole {
				continue
			}
			xid := slices.IndexFunc(d.Taints, func(t resourceapi.DeviceTaint) bool { return t.Key == gpu.TaintKeyXID })
			switch {
			case xid >= 0:
				t.failed++
				t.xids[d.Taints[xid].Value] = true
			case slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool { return t.Key == gpu.TaintKeyUnwatched }):
				t.unknown++
			default:
				t.healthy++
			}
		}
	}
	out := map[string]string{}
	for node, t := range nodes {
		if t.healthy+t.failed+t.unknown == 0 {
			continue
		}
		parts := []string{fmt.Sprintf("%d healthy", t.healthy)}
		if t.failed > 0 {
			parts = append(parts, fmt.Sprintf("%d failed (Xid %s)", t.failed, strings.Join(slices.SortedFunc(maps.Keys(t.xids), natural.Compare), ", ")))
		}
		if t.unknown > 0 {
			parts = append(parts, fmt.Sprintf("%d unknown (Xids not watched)", t.unknown))
		}
		out[node] = strings.Join(parts, ", ")
	}
	return out
}
