package labstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// TryLock takes an exclusive lock on file (created if absent) without
// waiting: the lock is the kernel's (flock), held until release is called
// or the process ends, however it ends. It fails with ErrLocked when
// another holder has it, in this process or another.
func TryLock(file string) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", file, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s is held)", ErrLocked, file)
		}
		return nil, fmt.Errorf("locking %s: %w", file, err)
	}
	return func() { f.Close() }, nil
}
