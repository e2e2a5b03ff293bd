package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// statusWriter acts as a driver that writes claim device status: an entry
// for every device of a claim a bound pod uses; remove says whether it
// takes the entries back once no pod uses the claim.
func statusWriter(t *testing.T, f *fakeCluster, remove bool) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			pods, err := f.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			used := map[string]bool{}
			for _, p := range pods.Items {
				for _, c := range p.Spec.ResourceClaims {
					if p.Spec.NodeName != "" && c.ResourceClaimName != nil {
						used[p.Namespace+"/"+*c.ResourceClaimName] = true
					}
				}
			}
			claims, err := f.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, c := range claims.Items {
				var want []resourceapi.AllocatedDeviceStatus
				if c.Status.Allocation != nil && used[c.Namespace+"/"+c.Name] {
					for _, r := range c.Status.Allocation.Devices.Results {
						want = append(want, resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device,
							Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.Now()}},
							Data:       &runtime.RawExtension{Raw: []byte(`{"uuid":"GPU-1"}`)}})
					}
				} else if !remove {
					continue
				}
				if len(want) == len(c.Status.Devices) {
					continue
				}
				c.Status.Devices = want
				_, _ = f.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, &c, metav1.UpdateOptions{})
			}
		}
	}()
}

func TestDeviceStatusWritten(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	statusWriter(t, f, true)
	if err := k.deviceStatus(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
}

func TestDeviceStatusNeverWritten(t *testing.T) {
	_, k := newFakeCluster(t, refuseWithEvent)
	err := k.deviceStatus(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "the status of claim status to have an entry of gpu.example.com for node-a/") {
		t.Fatalf("got %v, want the missing entry named", err)
	}
}

// withHealth gives the kit health commands that create and remove a file
// per device in dir, and returns a kubelet that reports the device of a
// pod Unhealthy while its file exists (report false: one that never does).
func withHealth(t *testing.T, f *fakeCluster, k *kit, report bool) string {
	dir := t.TempDir()
	k.m.Capabilities = map[manifest.Capability]bool{manifest.ResourceHealthStatus: true}
	k.m.Health = &manifest.HealthCommands{
		Fail: []string{"touch", filepath.Join(dir, "failed-{node}-{pool}-{device}")},
		Heal: []string{"rm", filepath.Join(dir, "failed-{node}-{pool}-{device}")},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil && report {
			time.Sleep(5 * time.Millisecond)
			files, _ := filepath.Glob(filepath.Join(dir, "failed-*"))
			if len(files) == 0 {
				continue
			}
			pods, err := f.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName == "" || len(p.Status.ContainerStatuses) > 0 {
					continue
				}
				p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "proof", AllocatedResourcesStatus: []v1.ResourceStatus{{
					Name:      v1.ResourceName("claim:health"),
					Resources: []v1.ResourceHealth{{ResourceID: "example.com/gpu=x", Health: v1.ResourceHealthStatusUnhealthy, Message: ptr.To("XID 79")}},
				}}}}
				_, _ = f.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
			}
		}
	}()
	return dir
}

func TestHealthReportedUnhealthy(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	dir := withHealth(t, f, k, true)
	if err := k.health(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
	// The heal command ran, with the device's names in it.
	if files, _ := filepath.Glob(filepath.Join(dir, "failed-*")); len(files) != 0 {
		t.Errorf("the heal command left %v", files)
	}
}

func TestHealthNeverReported(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	dir := withHealth(t, f, k, false)
	err := k.health(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "did not report its device Unhealthy") {
		t.Fatalf("got %v, want the missing report named", err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "failed-*")); len(files) != 0 {
		t.Errorf("the heal command did not run after the failed check: %v", files)
	}
}

func TestHealthCommandFailureIsReported(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	withHealth(t, f, k, true)
	k.m.Health.Fail = []string{filepath.Join(t.TempDir(), "no-such-command"), "{device}"}
	err := k.health(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "health.fail command") {
		t.Fatalf("got %v, want the failed command named", err)
	}
}

// A command named without a path is found on the PATH CommandEnv gives.
func TestHealthCommandOnTheCommandPath(t *testing.T) {
	f, k := newFakeCluster(t, refuseWithEvent)
	dir := withHealth(t, f, k, true)
	bin := t.TempDir()
	script := "#!/bin/sh\nexec touch " + filepath.Join(dir, "failed-$1") + "\n"
	if err := os.WriteFile(filepath.Join(bin, "fail-a-gpu"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	k.m.Health.Fail = []string{"fail-a-gpu", "{device}"}
	k.m.Health.Heal = []string{"rm", filepath.Join(dir, "failed-{device}")}
	k.o.CommandEnv = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	if err := k.health(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
}
