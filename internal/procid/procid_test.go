package procid

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// sleeper starts a process that runs until killed, and reaps it at the end.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestSelf(t *testing.T) {
	id, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if id.PID != os.Getpid() || id.StartTime == 0 || id.BootID == "" || id.Executable != exe {
		t.Errorf("Self() = %+v; want pid %d, a start time, a boot ID and executable %s", id, os.Getpid(), exe)
	}
	if !id.Alive() {
		t.Error("this process is not alive by its own ID")
	}
}

// TestReusedPIDIsNeverSignalled: an ID whose start time or boot differ
// from the process now holding its PID is that of a process that is
// gone; signalling it reaches nobody.
func TestReusedPIDIsNeverSignalled(t *testing.T) {
	cmd := sleeper(t)
	id, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for name, stale := range map[string]ID{
		"start time": {PID: id.PID, StartTime: id.StartTime + 1, BootID: id.BootID, Executable: id.Executable},
		"boot":       {PID: id.PID, StartTime: id.StartTime, BootID: "another-boot", Executable: id.Executable},
		"no record":  {PID: id.PID},
	} {
		if stale.Alive() {
			t.Errorf("%s: a process with another %s counts as alive", name, name)
		}
		if err := stale.Signal(syscall.SIGKILL); !errors.Is(err, ErrGone) {
			t.Errorf("%s: Signal = %v, want ErrGone", name, err)
		}
	}
	if err := Stop(context.Background(), []ID{{PID: id.PID, StartTime: id.StartTime + 1, BootID: id.BootID}}, 100*time.Millisecond); err != nil {
		t.Errorf("Stop of a gone process: %v", err)
	}
	if err := syscall.Kill(id.PID, 0); err != nil {
		t.Fatalf("the process with the reused PID was signalled: %v", err)
	}
	if _, err := Of(id.PID); err != nil {
		t.Fatalf("the process with the reused PID ended: %v", err)
	}
}

// TestIdentitySurvivesExec: a process recorded before it execs another
// program (a wrapper such as `sh -c 'exec plugin'` or `env K=V plugin`) is
// the same process after: alive, and signalled.
func TestIdentitySurvivesExec(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 0.2; exec sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	before, err := OfChild(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var after ID
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		after, err = Of(cmd.Process.Pid)
		return err == nil && after.Executable != before.Executable, nil
	}); err != nil {
		t.Fatalf("the wrapper (%s) did not exec: %v", before.Executable, err)
	}
	if !before.Alive() {
		t.Fatalf("recorded as %+v, the process that execed %s counts as gone", before, after.Executable)
	}
	if err := before.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("signalling the process after its exec: %v", err)
	}
	_ = cmd.Wait()
	if before.Alive() {
		t.Error("the process still counts as alive after SIGKILL")
	}
}

func TestStop(t *testing.T) {
	// A process that ignores SIGTERM is killed after the grace period.
	cmd := exec.Command("sh", "-c", `trap "" TERM; while :; do sleep 0.05; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	id, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := Stop(context.Background(), []ID{id}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process still runs after Stop returned")
	}
	if id.Alive() {
		t.Error("a stopped process counts as alive")
	}
}

func TestWaitGoneNamesWhatItWaitedFor(t *testing.T) {
	cmd := sleeper(t)
	id, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	err = WaitGone(context.Background(), []ID{id}, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "waited 100ms for pid") || !strings.Contains(err.Error(), "sleep") {
		t.Errorf("WaitGone = %v; want it to name the sleep process it waited 100ms for", err)
	}
}

// TestOfChildThatExited: a child that exits at once is still identified
// until it is waited for, so that a lab records it and reports its exit.
func TestOfChildThatExited(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, err := Of(cmd.Process.Pid)
		return errors.Is(err, ErrGone), nil
	})
	if err != nil {
		t.Fatalf("the exited child never counted as gone for Of: %v", err)
	}
	id, err := OfChild(cmd.Process.Pid)
	if err != nil || id.StartTime == 0 {
		t.Fatalf("OfChild of an exited, unwaited child = %+v, %v", id, err)
	}
	if id.Alive() {
		t.Error("an exited child counts as alive")
	}
}
