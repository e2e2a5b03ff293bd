package procid

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// zombie is SZOMB, a process's state in kinfo_proc once it has exited and
// before it is waited for.
const zombie = 5

func of(pid int, exited bool) (ID, error) {
	if pid <= 0 {
		return ID{}, fmt.Errorf("%w: pid %d", ErrGone, pid)
	}
	// kern.proc.pid answers a PID nobody has with an empty record, which
	// x/sys reports as EIO.
	info, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || int(info.Proc.P_pid) != pid {
		return ID{}, fmt.Errorf("%w: pid %d: %v", ErrGone, pid, err)
	}
	if info.Proc.P_stat == zombie && !exited {
		return ID{}, fmt.Errorf("%w: pid %d is a zombie", ErrGone, pid)
	}
	exe, err := executable(pid)
	if err != nil && !exited {
		return ID{}, fmt.Errorf("identifying pid %d: %w", pid, err)
	}
	boot, err := bootID()
	if err != nil {
		return ID{}, err
	}
	start := info.Proc.P_starttime
	return ID{PID: pid, StartTime: uint64(start.Sec)*1e6 + uint64(start.Usec), BootID: boot, Executable: exe}, nil
}

// executable is the path the process was started from, as
// kern.procargs2 begins: argc, then the path, NUL-terminated.
func executable(pid int) (string, error) {
	buf, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return "", fmt.Errorf("kern.procargs2: %w", err)
	}
	if len(buf) < 4 {
		return "", errors.New("kern.procargs2: short record")
	}
	path, _, ok := bytes.Cut(buf[4:], []byte{0})
	if !ok || len(path) == 0 {
		return "", errors.New("kern.procargs2: no executable path")
	}
	return string(path), nil
}

// Signal sends sig to the process id recorded: ErrGone when it no longer
// runs. macOS has no pidfd, so the process is checked just before the
// signal; its PID could only be reused in between if it ended there and
// the system wrapped its PIDs at once.
func (id ID) Signal(sig syscall.Signal) error {
	if err := id.check(); err != nil {
		return err
	}
	return signalled(id.PID, unix.Kill(id.PID, sig))
}

// readBootID reads the session UUID macOS draws at each boot.
func readBootID() (string, error) {
	id, err := unix.Sysctl("kern.bootsessionuuid")
	if err != nil {
		return "", fmt.Errorf("reading the kernel's boot session UUID: %w", err)
	}
	return strings.TrimSpace(id), nil
}
