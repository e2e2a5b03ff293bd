package nodeimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DebianSuite is the Debian release of the node's root filesystem.
const DebianSuite = "bookworm"

// DebianMirror is where the root filesystem's packages come from.
const DebianMirror = "http://deb.debian.org/debian"

// Packages are the Debian packages of a node's root filesystem: systemd
// as its init, what the kubelet, kube-proxy and kubeadm run (iptables,
// conntrack, mount, iproute2), Debian's runc and CNI plugins for
// containerd, jq for kind's container hook, and busybox for the pause
// image.
var Packages = []string{
	"systemd", "dbus", "bash", "ca-certificates", "procps", "util-linux", "mount", "kmod",
	"iptables", "nftables", "conntrack", "iproute2", "ethtool", "e2fsprogs", "libseccomp2", "pigz",
	"runc", "containernetworking-plugins", "busybox-static", "jq",
}

// rootfsHooks make the root filesystem a kind node's: systemd starts no
// unit but those the node enables (kubelet, containerd and the image
// import are enabled in the image's own layer), reads no kernel log, is
// /sbin/init, and the binfmt unit a container cannot run is masked.
var rootfsHooks = []string{
	`chroot "$1" sh -c 'find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete'`,
	`chroot "$1" sh -c 'rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*'`,
	`chroot "$1" sh -c 'echo ReadKMsg=no >> /etc/systemd/journald.conf && ln -sf /usr/lib/systemd/systemd /sbin/init && ln -sf /dev/null /etc/systemd/system/systemd-binfmt.service && mkdir -p /etc/kubernetes/manifests'`,
}

// RootfsKey names a root filesystem of these packages and hooks.
func RootfsKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n%s\n%s\n", DebianSuite, DebianMirror, strings.Join(Packages, ","), strings.Join(rootfsHooks, "\n"))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Rootfs writes the node's Debian root filesystem as a tar archive into
// dir with mmdebstrap (Debian's package mmdebstrap), from Debian's
// packages, unless one of the same packages is there; it returns the
// archive's path and whether it was there.
func Rootfs(ctx context.Context, dir string) (string, bool, error) {
	out := filepath.Join(dir, "rootfs-"+DebianSuite+"-"+RootfsKey()+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, true, nil
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", false, fmt.Errorf("building a kind node's root filesystem needs mmdebstrap (apt-get install mmdebstrap): %w", err)
	}
	tmp := strings.TrimSuffix(out, ".tar") + ".partial.tar" // mmdebstrap writes the format its name says
	args := []string{"--variant=minbase", "--include=" + strings.Join(Packages, ",")}
	for _, h := range rootfsHooks {
		args = append(args, "--customize-hook="+h)
	}
	args = append(args, DebianSuite, tmp, DebianMirror)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		tail := output.String()
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return "", false, fmt.Errorf("mmdebstrap %s: %w\n%s", DebianSuite, err, tail)
	}
	return out, false, os.Rename(tmp, out)
}
