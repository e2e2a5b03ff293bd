package procid

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

func of(pid int, exited bool) (ID, error) {
	if pid <= 0 {
		return ID{}, fmt.Errorf("%w: pid %d", ErrGone, pid)
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return ID{}, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return ID{}, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	if st.State == "Z" && !exited {
		return ID{}, fmt.Errorf("%w: pid %d is a zombie", ErrGone, pid)
	}
	exe, err := p.Executable()
	if err != nil {
		return ID{}, fmt.Errorf("identifying pid %d: %w", pid, err)
	}
	boot, err := bootID()
	if err != nil {
		return ID{}, err
	}
	return ID{PID: pid, StartTime: st.Starttime, BootID: boot, Executable: strings.TrimSuffix(exe, " (deleted)")}, nil
}

// Signal sends sig to the process id recorded, and to no other: ErrGone
// when it no longer runs.
func (id ID) Signal(sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("%w: pid %d", ErrGone, id.PID)
		}
		return fmt.Errorf("opening pid %d: %w", id.PID, err)
	}
	defer unix.Close(fd)
	// The pidfd holds the process that had the PID when it was opened:
	// checked now, it is the one signalled, even if the PID is reused in
	// between.
	if err := id.check(); err != nil {
		return err
	}
	return signalled(id.PID, unix.PidfdSendSignal(fd, sig, nil, 0))
}

// readBootID reads the boot ID the kernel draws at each boot.
func readBootID() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("reading the kernel's boot ID: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}
