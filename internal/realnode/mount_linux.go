package realnode

import "syscall"

// unmountDetached detaches the mount at once and lets the kernel finish
// when it is no longer busy, as umount -l does.
func unmountDetached(path string) error { return syscall.Unmount(path, syscall.MNT_DETACH) }
