package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// deviceStatus checks DRAResourceClaimDeviceStatus: once a pod's claim is
// prepared, the claim's status.devices has an entry of the driver for the
// allocated device. (Whether the driver removes it at unprepare cannot be
// told from the cluster: the claim controller drops the entries itself
// when it deallocates a claim no pod uses.) The pod is then deleted and
// waited for, so that the node has unprepared the claim before the next
// check.
func (s *suite) deviceStatus(ctx context.Context, logf logFunc, k *kit) error {
	_, got, _, err := k.oneDevice(ctx, "status", nil)
	if err != nil {
		return err
	}
	written, err := k.statusEntry(ctx, "status", got, nil)
	if err != nil {
		return err
	}
	var conds []string
	for _, c := range written.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	data := "none"
	if written.Data != nil {
		data = string(written.Data.Raw)
	}
	logf("the driver wrote status.devices for %s/%s: conditions %v, data %s", got.Pool, got.Device, conds, data)
	return k.remove(ctx, []string{"status"}, nil)
}

// statusEntry waits until the claim's status.devices has the driver's
// entry for the allocated device (and share) that ready accepts (nil: any),
// and returns it; ready says what it still misses.
func (k *kit) statusEntry(ctx context.Context, claim string, got resourceapi.DeviceRequestAllocationResult, ready func(*resourceapi.AllocatedDeviceStatus) (string, bool)) (*resourceapi.AllocatedDeviceStatus, error) {
	var entry *resourceapi.AllocatedDeviceStatus
	what := fmt.Sprintf("the status of claim %s to have an entry of %s for %s/%s", claim, got.Driver, got.Pool, got.Device)
	err := poll(ctx, k.m.Timeouts.PodRunning, what, func(ctx context.Context) (string, bool, error) {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		for i, d := range c.Status.Devices {
			if d.Driver == got.Driver && d.Pool == got.Pool && d.Device == got.Device && ptr.Deref(d.ShareID, "") == string(ptr.Deref(got.ShareID, "")) {
				if ready != nil {
					if missing, ok := ready(&d); !ok {
						return "the device's entry " + missing, false, nil
					}
				}
				entry = &c.Status.Devices[i]
				return "", true, nil
			}
		}
		return fmt.Sprintf("status.devices has %d entries, none for the device", len(c.Status.Devices)), false, nil
	})
	return entry, err
}

// health checks ResourceHealthStatus: the manifest's fail command makes the
// device of a running pod fail, and the kubelet reports it Unhealthy in the
// pod's status (allocatedResourcesStatus), while the pod exists: it may be
// evicted soon after (its claim tolerates NoExecute device taints, but a
// driver may do more), so its status is watched from before the failure.
// The heal command runs whatever happens.
func (s *suite) health(ctx context.Context, logf logFunc, k *kit) (err error) {
	// The claim tolerates NoExecute device taints: a driver that taints a
	// failed device must not have the pod evicted before the kubelet
	// writes its status.
	req := k.request("dev")
	req.Exactly.Tolerations = []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoExecute}}
	if err := k.createClaim(ctx, "health", req); err != nil {
		return err
	}
	if err := k.pod(ctx, "health", []string{"health"}, nil); err != nil {
		return err
	}
	if _, err := k.proof(ctx, "health"); err != nil {
		return err
	}
	results, err := k.claimResults(ctx, "health")
	if err != nil {
		return err
	}
	if len(results) != 1 {
		return fmt.Errorf("claim health got %d devices, want one", len(results))
	}
	got := results[0]
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, "health", metav1.GetOptions{})
	if err != nil {
		return err
	}
	node := pod.Spec.NodeName
	w, err := k.client.CoreV1().Pods(k.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=health", ResourceVersion: pod.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	vars := map[string]string{"{node}": node, "{pool}": got.Pool, "{device}": got.Device}
	if out, err := s.runCommand(ctx, "fail", s.m.Health.Fail, vars); err != nil {
		return err
	} else if out != "" {
		logf("health.fail: %s", out)
	}
	defer func() {
		if out, herr := s.runCommand(context.WithoutCancel(ctx), "heal", s.m.Health.Heal, vars); herr != nil {
			err = errors.Join(err, fmt.Errorf("healing %s/%s: %w", got.Pool, got.Device, herr))
		} else if out != "" {
			logf("health.heal: %s", out)
		}
	}()
	deadline := time.After(k.m.Timeouts.PodRunning)
	last := "no status update"
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of pod health ended")
			}
			p, isPod := ev.Object.(*v1.Pod)
			if !isPod {
				continue
			}
			if h, msg := unhealthy(p); h {
				logf("pod health reports its device %s/%s Unhealthy: %s", got.Pool, got.Device, msg)
				return nil
			}
			last = fmt.Sprintf("pod %s: %s", p.Name, allocatedHealth(p))
		case <-deadline:
			return fmt.Errorf("within %v of the fail command the pod's status did not report its device Unhealthy; last: %s", k.m.Timeouts.PodRunning, last)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unhealthy says whether a pod's status reports a device Unhealthy.
func unhealthy(p *v1.Pod) (bool, string) {
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				if r.Health == v1.ResourceHealthStatusUnhealthy {
					return true, fmt.Sprintf("%s %s %s", rs.Name, r.ResourceID, ptr.Deref(r.Message, ""))
				}
			}
		}
	}
	return false, ""
}

func allocatedHealth(p *v1.Pod) string {
	var out []string
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				out = append(out, fmt.Sprintf("%s=%s", r.ResourceID, r.Health))
			}
		}
	}
	if len(out) == 0 {
		return "no allocatedResourcesStatus"
	}
	return strings.Join(out, ", ")
}

// runCommand runs one of the manifest's health commands, with {node},
// {pool} and {device} replaced, and returns its output.
func (s *suite) runCommand(ctx context.Context, which string, argv []string, vars map[string]string) (string, error) {
	args := make([]string, len(argv))
	for i, a := range argv {
		for k, v := range vars {
			a = strings.ReplaceAll(a, k, v)
		}
		args[i] = a
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(cmd.Environ(), s.o.CommandEnv...)
	// A bare name is looked up on the command's PATH, which CommandEnv may
	// set, not the suite's.
	if !strings.Contains(args[0], "/") {
		if p := lookPath(args[0], cmd.Env); p != "" {
			cmd.Path, cmd.Err = p, nil
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("the manifest's health.%s command %q: %w: %s", which, args, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// lookPath finds an executable on the PATH of an environment (its last
// PATH entry wins, as exec does), "" if none.
func lookPath(name string, env []string) string {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		f := filepath.Join(dir, name)
		if st, err := os.Stat(f); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return f
		}
	}
	return ""
}
