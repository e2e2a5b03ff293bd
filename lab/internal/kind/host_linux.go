package kind

import "golang.org/x/sys/unix"

// cgroup2At tells whether dir is a mount of cgroup v2.
func cgroup2At(dir string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(dir, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC
}
