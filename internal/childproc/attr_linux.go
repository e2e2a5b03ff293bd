// Package childproc starts children that do not outlive their parent.
package childproc

import "syscall"

// Attr ends the child with SIGKILL when its parent ends, even when the
// parent is killed and runs no cleanup of its own.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
