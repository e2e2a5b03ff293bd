package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// Kinds of faults the soak injects.
const (
	// FaultKillDriver: SIGKILL of a node's GPU driver (the lab starts it
	// again, as a DaemonSet would).
	FaultKillDriver = "kill-driver"
	// FaultKillNode: SIGKILL of a hollow node's kubelet (the lab starts it
	// again, as systemd would).
	FaultKillNode = "kill-node"
	// FaultKillContainerd: SIGKILL of a real node's containerd (the lab
	// starts it again).
	FaultKillContainerd = "kill-containerd"
	// FaultGPUFail and FaultGPUHeal: gpu:fail of a GPU with an XID, and
	// gpu:heal of a failed one.
	FaultGPUFail = "gpu-fail"
	FaultGPUHeal = "gpu-heal"
	// FaultKillLab: SIGKILL of the lab process (its nodes and drivers die
	// with it), then lab:up, which resumes the lab on its etcd data.
	FaultKillLab = "kill-lab"
)

// FaultKinds are every kind of fault, in the order reports list them.
var FaultKinds = []string{FaultKillDriver, FaultKillNode, FaultKillContainerd, FaultGPUFail, FaultGPUHeal, FaultKillLab}

// maxFailed is how many GPUs may be failed at once: the soak's pods keep
// somewhere to run.
const maxFailed = 2

// resumeTimeout bounds lab:up of a killed lab.
const resumeTimeout = 3 * time.Minute

// faults injects faults into a lab.
type faults struct {
	lab    *lab.Lab
	cfg    *config.Config
	client kubernetes.Interface
	rng    *rand.Rand
	// failed are the GPUs failed and not healed yet.
	failed []lab.GPURef
	// cycle is the order in which kinds are tried: each kind gets its
	// turn before any gets a second, so that a short soak sees them all.
	cycle []string
}

// inject injects the next available fault and says which, and on what.
// pause is held (for writing) while the lab's API is down. A fault that
// cannot be injected now is an error too: the caller decides (a GPU is
// failed and healed by name of a published device, and a node whose
// kubelet has just started again publishes none for a moment).
func (f *faults) inject(ctx context.Context, pause interface {
	Lock()
	Unlock()
}, c *checker) (kind, target string, err error) {
	for tries := 0; tries < 2*len(FaultKinds); tries++ {
		if len(f.cycle) == 0 {
			f.cycle = f.newCycle()
		}
		kind, f.cycle = f.cycle[0], f.cycle[1:]
		st, err := f.lab.Status(ctx)
		if err != nil {
			return "", "", err
		}
		switch kind {
		case FaultKillDriver:
			target, err = f.killChild(st, status.RoleDriver, nil)
		case FaultKillNode:
			target, err = f.killChild(st, status.RoleNode, func(n config.Node) bool { return n.Kind == config.NodeHollow })
		case FaultKillContainerd:
			target, err = f.killChild(st, status.RoleContainerd, nil)
		case FaultGPUFail:
			target, err = f.failGPU(ctx)
		case FaultGPUHeal:
			target, err = f.healGPU(ctx)
		case FaultKillLab:
			pause.Lock()
			target, err = f.killLab(ctx, st, c)
			pause.Unlock()
		}
		if err != nil || target != "" {
			return kind, target, err
		}
	}
	return "", "", nil
}

// newCycle is every kind of fault in a random order, but a heal after a
// failure, so that it has a GPU to heal.
func (f *faults) newCycle() []string {
	cycle := shuffled(f.rng, FaultKinds)
	fail, heal := slices.Index(cycle, FaultGPUFail), slices.Index(cycle, FaultGPUHeal)
	if heal < fail {
		cycle[fail], cycle[heal] = cycle[heal], cycle[fail]
	}
	return cycle
}

// roleNames name the processes the soak kills.
var roleNames = map[string]string{status.RoleNode: "kubelet", status.RoleDriver: "GPU driver", status.RoleContainerd: "containerd"}

// killChild kills a random running process of a role the lab recorded
// (of a node that matches, when given); "" when there is none.
func (f *faults) killChild(st *lab.Status, role string, match func(config.Node) bool) (string, error) {
	var candidates []status.Process
	for _, p := range st.Processes {
		if p.Role != role || !p.Running || !processID(p).Alive() {
			continue
		}
		if match != nil {
			n := f.node(p.Node)
			if n == nil || !match(*n) {
				continue
			}
		}
		candidates = append(candidates, p)
	}
	if len(candidates) == 0 {
		return "", nil
	}
	p := candidates[f.rng.IntN(len(candidates))]
	// Signal checks the process is the one the lab recorded (PID and
	// start time): a PID reused by another program is left alone.
	if err := processID(p).Signal(syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("killing the %s of node %s: %w", roleNames[role], p.Node, err)
	}
	return fmt.Sprintf("%s of node %s (pid %d)", roleNames[role], p.Node, p.PID), nil
}

func (f *faults) node(name string) *config.Node {
	for i := range f.cfg.Nodes {
		if f.cfg.Nodes[i].Name == name {
			return &f.cfg.Nodes[i]
		}
	}
	return nil
}

// xids are the XIDs the soak fails GPUs with: NoExecute (evicting) and
// NoSchedule ones.
var xids = []int{79, 48, 95, 94}

// failGPU fails a random healthy GPU of a node whose driver takes faults.
func (f *faults) failGPU(ctx context.Context) (string, error) {
	if len(f.failed) >= maxFailed || f.cfg.Driver != nil {
		return "", nil
	}
	list, err := f.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var gpus []lab.GPURef
	for _, s := range list.Items {
		n := f.node(ptr.Deref(s.Spec.NodeName, ""))
		if s.Spec.Driver != gpu.DriverName || n == nil || n.GPUs == nil || n.GPUs.Mode != config.GPUModeDRA {
			continue
		}
		for i := range s.Spec.Devices {
			ref := lab.GPURef{Node: n.Name, Device: s.Spec.Devices[i].Name}
			if attr(&s.Spec.Devices[i], gpu.AttrType) == gpu.TypeGPU && !slices.Contains(f.failed, ref) {
				gpus = append(gpus, ref)
			}
		}
	}
	if len(gpus) == 0 {
		return "", nil
	}
	ref := gpus[f.rng.IntN(len(gpus))]
	xid := xids[f.rng.IntN(len(xids))]
	if _, err := f.lab.FailGPU(ctx, ref, xid); err != nil {
		return "", err
	}
	f.failed = append(f.failed, ref)
	return fmt.Sprintf("%s with XID %d", ref, xid), nil
}

// healGPU heals a random failed GPU.
func (f *faults) healGPU(ctx context.Context) (string, error) {
	if len(f.failed) == 0 {
		return "", nil
	}
	i := f.rng.IntN(len(f.failed))
	ref := f.failed[i]
	if err := f.lab.HealGPU(ctx, ref); err != nil {
		return "", err
	}
	f.failed = slices.Delete(f.failed, i, i+1)
	return ref.String(), nil
}

// healAll heals every GPU the soak failed, trying each for up to a
// minute: a node whose kubelet has just started again has no
// ResourceSlices until its driver publishes them anew, and a GPU is healed
// only by name of a published one.
func (f *faults) healAll(ctx context.Context) error {
	for len(f.failed) > 0 {
		var last error
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			last = f.lab.HealGPU(ctx, f.failed[0])
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("healing %s: %w (last: %w)", f.failed[0], err, last)
		}
		f.failed = f.failed[1:]
	}
	return nil
}

// killLab kills the lab process, brings the lab up again and checks that
// it was resumed with every claim allocated before still allocated, to the
// same devices.
func (f *faults) killLab(ctx context.Context, st *lab.Status, c *checker) (string, error) {
	before, err := f.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	pods, err := f.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	// A claim on its way out (deleted, or of a pod being deleted) may be
	// gone after lab:up for good reason: only the others must survive.
	leaving := map[types.UID]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			leaving[p.UID] = true
		}
	}
	allocated := map[types.UID]*resourceapi.ResourceClaim{}
	for i := range before.Items {
		if c := &before.Items[i]; c.Status.Allocation != nil && !claimLeaving(c, leaving) {
			allocated[c.UID] = c
		}
	}
	// Its nodes and drivers die with it (they are its children, killed
	// when it dies): the resumed lab starts them on their directories.
	var procs []procid.ID
	for _, p := range st.Processes {
		procs = append(procs, processID(p))
	}
	if len(procs) == 0 || st.Processes[0].Role != status.RoleLab {
		return "", fmt.Errorf("lab %s records no lab process (phase %s)", st.Name, st.Phase)
	}
	if err := procs[0].Signal(syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("killing the lab process: %w", err)
	}
	if err := procid.WaitGone(ctx, procs, 30*time.Second); err != nil {
		return "", err
	}
	upCtx, cancel := context.WithTimeout(ctx, resumeTimeout)
	defer cancel()
	started := time.Now()
	res, err := f.lab.Up(upCtx)
	target := fmt.Sprintf("lab process (pid %d)", procs[0].PID)
	if err != nil {
		c.violate(newFinding(InvResume, "lab:up of the killed lab failed: "+err.Error(), target))
		return target, fmt.Errorf("lab:up of the killed lab: %w", err)
	}
	klog.FromContext(ctx).V(1).Info("Lab up again", "resumed", res.Resumed, "took", time.Since(started))
	if !res.Resumed {
		c.violate(newFinding(InvResume, "lab:up did not resume the killed lab on its state", target))
		return target, nil
	}
	after, err := f.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return target, err
	}
	now := map[types.UID]*resourceapi.ResourceClaim{}
	for i := range after.Items {
		now[after.Items[i].UID] = &after.Items[i]
	}
	c.count(InvResume)
	for uid, old := range allocated {
		cur := now[uid]
		switch {
		case cur == nil:
			c.violate(newFinding(InvResume, "allocated before the lab was killed, gone after lab:up", claimRef(old)))
		case cur.Status.Allocation == nil:
			c.violate(newFinding(InvResume, "allocated before the lab was killed, not allocated after lab:up", claimRef(old)))
		case !slices.Equal(allocatedDevices(cur), allocatedDevices(old)):
			c.violate(newFinding(InvResume, fmt.Sprintf("allocated %v before the lab was killed, %v after lab:up", allocatedDevices(old), allocatedDevices(cur)), claimRef(old)))
		}
	}
	return fmt.Sprintf("%s; resumed in %.1f s with %d allocated claims", target, time.Since(started).Seconds(), len(allocated)), nil
}

// claimLeaving tells whether a claim is being deleted, or belongs to or is
// reserved for a pod that is.
func claimLeaving(c *resourceapi.ResourceClaim, leavingPods map[types.UID]bool) bool {
	if c.DeletionTimestamp != nil {
		return true
	}
	for _, o := range c.OwnerReferences {
		if leavingPods[o.UID] {
			return true
		}
	}
	for _, r := range c.Status.ReservedFor {
		if leavingPods[r.UID] {
			return true
		}
	}
	return false
}
