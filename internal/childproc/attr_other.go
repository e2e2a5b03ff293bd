//go:build !linux

// Package childproc starts children that do not outlive their parent.
package childproc

import "syscall"

// Attr: only Linux ends a child with its parent. Elsewhere a child whose
// parent was killed (not stopped) runs on; a lab's are stopped by the next
// lab:up or lab:down, which stops every process the lab recorded.
func Attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
