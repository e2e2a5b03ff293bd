package labserver

import "syscall"

// childAttr: a child never outlives its lab, even when the lab is killed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
