package lab_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/lab"
)

// TestUpResumesKilledLab: a lab whose process was killed (a crash, the OOM
// killer, a reboot) comes back with Up on its own state: the claim
// allocated before is the same object, allocated to the same device, its
// pod runs on, the driver has it prepared, and the API server serves where
// it did to the clients it had. A resume that fails keeps the state, and the
// next Up resumes it. Up with another configuration replaces the stale
// state with a fresh lab instead.
func TestUpResumesKilledLab(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	root := stateRoot(t)
	l, _, client := upLab(ctx, t, root, bin, smallConfig("t-resume", "n1"))

	const ns = "default"
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "gpu", gpu.ClassAny, "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, scratchlab.ClaimPod(ns, "worker", "gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := runningClaim(ctx, t, client, ns, "worker")
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}

	killLab(ctx, t, st)
	stale, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stale.Phase != "Failed" || !strings.Contains(stale.Message, "resumes") {
		t.Errorf("status of a killed lab = %s: %s; want Failed, saying lab:up resumes it", stale.Phase, stale.Message)
	}

	// A resume that fails (here it runs out of time) keeps the state for
	// another try, and says so.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	res, err := l.Up(short)
	cancel()
	if err == nil || !res.Resumed || !strings.Contains(err.Error(), "state is kept") {
		t.Fatalf("Up of a killed lab out of time = %+v, %v; want a failed resume that keeps the state", res, err)
	}
	if failed, err := l.Status(ctx); err != nil || failed.Phase != "Failed" || !strings.Contains(failed.Message, "resuming failed") || !strings.Contains(failed.Message, "resumes") {
		t.Errorf("status after a failed resume = %+v, %v; want Failed, saying why and that lab:up resumes it", failed, err)
	}

	res, err = l.Up(ctx)
	if err != nil || !res.Resumed || res.Reused {
		t.Fatalf("Up of a killed lab whose first resume failed = %+v, %v; want it resumed", res, err)
	}
	st2, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Phase != "Running" || st2.PID == st.PID || st2.APIServer != st.APIServer {
		t.Errorf("resumed lab: phase %s, pid %d (was %d), API server %s (was %s); want Running, a new process, the same address",
			st2.Phase, st2.PID, st.PID, st2.APIServer, st.APIServer)
	}
	// The lab keeps its CA: a client of the old kubeconfig still works.
	after := runningClaim(ctx, t, client, ns, "worker")
	if after.UID != before.UID || deviceOf(after) != deviceOf(before) {
		t.Errorf("after resuming, the pod's claim is %s on %s; before it was %s on %s", after.UID, deviceOf(after), before.UID, deviceOf(before))
	}
	cp, err := kit.ReadCheckpoint(filepath.Join(labstate.Dir(st2.StateDir).Node("n1").Driver(labstate.RoleDriver).Checkpoint, "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cp.Claims[after.UID]; !ok || len(cp.Claims) != 1 {
		t.Errorf("the resumed driver's checkpoint holds %d claims, want the pod's claim %s alone", len(cp.Claims), after.UID)
	}

	// Killed again and brought up with another configuration: the old
	// state is not resumed but replaced.
	killLab(ctx, t, st2)
	fresh := newLab(t, root, bin, smallConfig("t-resume", "n1", "n2"))
	res, err = fresh.Up(ctx)
	if err != nil || res.Resumed || res.Reused {
		t.Fatalf("Up over a killed lab of another configuration = %+v, %v; want a fresh lab", res, err)
	}
	client = newClient(t, fresh)
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "gpu", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the fresh lab has the old lab's claim template (err %v)", err)
	}
	if _, err := os.Stat(filepath.Join(st2.StateDir, "lab.pid")); err != nil {
		t.Errorf("the fresh lab has no pid file: %v", err)
	}
}

// killLab kills the lab process as a crash would (its nodes die with it)
// and waits for it to be gone.
func killLab(ctx context.Context, t *testing.T, st *lab.Status) {
	t.Helper()
	p := labProcess(t, st)
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := procid.WaitGone(ctx, []procid.ID{p}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func newClient(t *testing.T, l *lab.Lab) kubernetes.Interface {
	t.Helper()
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(restConfig)
}

// runningClaim waits for a pod to run and returns its one claim, allocated.
func runningClaim(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	var claim *resourceapi.ResourceClaim
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("phase %s, claims %+v", p.Status.Phase, p.Status.ResourceClaimStatuses)
		if p.Status.Phase != v1.PodRunning || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, nil
		}
		claim, err = client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		return claim.Status.Allocation != nil && reservedFor(claim, p.UID), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s did not run with an allocated claim (%s): %v", ns, pod, last, err)
	}
	return claim
}

func reservedFor(c *resourceapi.ResourceClaim, pod types.UID) bool {
	for _, r := range c.Status.ReservedFor {
		if r.UID == pod {
			return true
		}
	}
	return false
}

// deviceOf names the devices a claim is allocated.
func deviceOf(c *resourceapi.ResourceClaim) string {
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return strings.Join(out, ",")
}
