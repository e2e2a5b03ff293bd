//go:build !linux

package labserver

import "syscall"

// childAttr: only Linux ends a child with its parent. Elsewhere the
// children of a lab that was killed (not stopped) run on until the next
// lab:up or lab:down, which stops every process the lab recorded.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
