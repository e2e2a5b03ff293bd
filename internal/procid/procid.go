// Package procid identifies a process by more than its PID. A PID is
// recycled once its process is gone (after a wrap, or a reboot), so a lab
// that remembered only PIDs could signal or count as alive a stranger's
// process. An ID adds the process's start time, the kernel's boot and the
// executable; a process matches it only if all of them agree, and signals
// go through a pidfd opened before the check, so the process checked is the
// process signalled (on Linux; macOS has no pidfd, and checks the process
// just before signalling it).
package procid

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// ID is a process as it was when recorded.
type ID struct {
	PID int `json:"pid"`
	// StartTime is the process's start: in clock ticks since boot on
	// Linux, in microseconds since the epoch on macOS.
	StartTime uint64 `json:"startTime,omitempty"`
	// BootID is the kernel's boot ID then.
	BootID string `json:"bootID,omitempty"`
	// Executable is the path of the process's executable then, for
	// messages: a process that execs another program stays itself.
	Executable string `json:"executable,omitempty"`
}

// ErrGone means no process matches an ID any longer: it ended, or its PID
// now belongs to another process.
var ErrGone = errors.New("the process is gone")

// Of identifies the running process with that PID.
func Of(pid int) (ID, error) { return of(pid, false) }

// OfChild identifies a child the caller has started and not yet waited
// for: its PID is still its own, even if it has already exited.
func OfChild(pid int) (ID, error) { return of(pid, true) }

// Self identifies the calling process.
func Self() (ID, error) { return Of(os.Getpid()) }

// Alive reports whether the process that id recorded still runs (and is
// not a zombie). An ID without a start time or boot (written by an older
// dralab, or never recorded) matches nothing.
func (id ID) Alive() bool {
	return id.check() == nil
}

func (id ID) check() error {
	if id.StartTime == 0 || id.BootID == "" {
		return fmt.Errorf("%w: pid %d was recorded without its start time", ErrGone, id.PID)
	}
	now, err := Of(id.PID)
	if err != nil {
		return err
	}
	switch {
	case now.BootID != id.BootID:
		return fmt.Errorf("%w: pid %d was recorded before a reboot", ErrGone, id.PID)
	case now.StartTime != id.StartTime:
		return fmt.Errorf("%w: pid %d now belongs to another process (%s), started at tick %d, not %d", ErrGone, id.PID, now.Executable, now.StartTime, id.StartTime)
	}
	// The executable is not compared: a process that execs (a wrapper,
	// `env NODE_NAME=… plugin`, `sh -c 'exec plugin'`) is the same
	// process, with the same start time; a PID given to another process
	// has another start time.
	return nil
}

// String is "pid N" with the executable's name.
func (id ID) String() string {
	if id.Executable == "" {
		return fmt.Sprintf("pid %d", id.PID)
	}
	return fmt.Sprintf("pid %d (%s)", id.PID, id.Executable)
}

// Stop asks each process to stop with SIGTERM, waits up to grace for them
// to end, then kills those left and waits up to another grace. It returns
// an error naming the processes still running after that.
func Stop(ctx context.Context, ids []ID, grace time.Duration) error {
	var live []ID
	for _, id := range ids {
		if id.Signal(syscall.SIGTERM) == nil {
			live = append(live, id)
		}
	}
	if WaitGone(ctx, live, grace) == nil {
		return nil
	}
	for _, id := range live {
		_ = id.Signal(syscall.SIGKILL)
	}
	return WaitGone(ctx, live, grace)
}

// WaitGone waits up to timeout for every process to end, and names those
// still running when it gives up.
func WaitGone(ctx context.Context, ids []ID, timeout time.Duration) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		left = left[:0]
		for _, id := range ids {
			if id.Alive() {
				left = append(left, id.String())
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waited %s for %s to end: %w", timeout, strings.Join(left, ", "), err)
	}
	return nil
}

var (
	bootOnce sync.Once
	boot     string
	bootErr  error
)

// bootID is the kernel's boot, read once.
func bootID() (string, error) {
	bootOnce.Do(func() { boot, bootErr = readBootID() })
	return boot, bootErr
}

// signalled is the outcome of sending pid a signal: ErrGone when no
// process has the PID any longer.
func signalled(pid int, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("%w: pid %d", ErrGone, pid)
	default:
		return fmt.Errorf("signalling pid %d: %w", pid, err)
	}
}
