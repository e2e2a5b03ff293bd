//go:build mage

package main

import (
	"context"
	"fmt"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab"
)

// Gpu fails and heals GPUs of the lab, as a GPU that reports an XID does:
// the node's driver reports the GPU Unhealthy to the kubelet (the pods that
// hold it show it in their status) and taints it in its ResourceSlice.
type Gpu mg.Namespace

// Fail fails a GPU, <node>/<device> (e.g. gpu-h100/gpu-0), with XID 79: the
// GPU has fallen off the bus. Its pods are evicted (NoExecute taint).
func (Gpu) Fail(ctx context.Context, target string) error {
	return failGPU(ctx, target, gpu.DefaultXID)
}

// FailXid fails a GPU with an XID of your choice, e.g. 48 (double-bit ECC
// error: NoSchedule, running pods stay). Mage targets take no optional
// arguments, hence two targets.
func (Gpu) FailXid(ctx context.Context, target string, xid int) error {
	return failGPU(ctx, target, xid)
}

// Heal makes a failed GPU healthy again: its taint is removed.
func (Gpu) Heal(ctx context.Context, target string) error {
	u := ui.Stderr()
	ref, l, err := gpuOfLab(target)
	if err != nil {
		return err
	}
	done := u.Step(fmt.Sprintf("Healing GPU %s of lab %q", ref, l.Config().Name))
	err = l.HealGPU(ctx, ref)
	done(err)
	return err
}

func failGPU(ctx context.Context, target string, xid int) error {
	u := ui.Stderr()
	ref, l, err := gpuOfLab(target)
	if err != nil {
		return err
	}
	done := u.Step(fmt.Sprintf("Failing GPU %s of lab %q with XID %d", ref, l.Config().Name, xid))
	x, err := l.FailGPU(ctx, ref, xid)
	done(err)
	if err != nil {
		return err
	}
	fault, ok := x.Fault()
	if !ok {
		u.Println(fmt.Sprintf("XID %d (%s) is an application's error, not the GPU's: the driver keeps the GPU healthy.", xid, x.Description))
		return nil
	}
	u.Next(fmt.Sprintf("The driver reports %s Unhealthy (%s) and taints it %s=%s:%s. Watch:", ref, fault.Message, fault.Taint.Key, fault.Taint.Value, fault.Taint.Effect),
		"kubectl get resourceslices -o yaml | grep -B2 -A4 taints",
		"kubectl get pods -o custom-columns=NAME:.metadata.name,HEALTH:.status.containerStatuses[*].allocatedResourcesStatus[*].resources[*].health",
		"go run mage.go gpu:heal "+ref.String())
	return nil
}

func gpuOfLab(target string) (lab.GPURef, *lab.Lab, error) {
	ref, err := lab.ParseGPURef(target)
	if err != nil {
		return ref, nil, err
	}
	l, err := lab.Existing()
	return ref, l, err
}
