package nodeimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dralab/dralab/internal/ociimage"
)

// DebianSuite is the Debian release of the node's root filesystem.
const DebianSuite = "bookworm"

// DebianSources are where the root filesystem's packages come from: the
// release, its updates and its security updates, so that the runc and
// systemd of privileged nodes are the ones Debian's security team last
// fixed.
var DebianSources = []string{
	"deb http://deb.debian.org/debian " + DebianSuite + " main",
	"deb http://deb.debian.org/debian " + DebianSuite + "-updates main",
	"deb http://deb.debian.org/debian-security " + DebianSuite + "-security main",
}

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

// RootfsKey names a root filesystem of these sources, packages and hooks
// and of the package versions they resolve to (ResolveVersions): a
// package's new version, a security update among them, makes a new one.
func RootfsKey(versions []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n", DebianSuite, strings.Join(DebianSources, "\n"), strings.Join(Packages, ","), strings.Join(rootfsHooks, "\n"), strings.Join(versions, "\n"))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// mmdebstrapArgs are mmdebstrap's arguments for the root filesystem,
// written to target, before the options of the run.
func mmdebstrapArgs(target string, options ...string) []string {
	args := append(options, "--variant=minbase", "--include="+strings.Join(Packages, ","))
	for _, h := range rootfsHooks {
		args = append(args, "--customize-hook="+h)
	}
	return append(append(args, DebianSuite, target), DebianSources...)
}

// ResolveVersions asks Debian's archive, through mmdebstrap's simulated
// run (apt resolves, nothing is downloaded but the package lists: seconds),
// which versions the root filesystem's packages and their dependencies
// have now: "name=version", sorted.
func ResolveVersions(ctx context.Context) ([]string, error) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return nil, fmt.Errorf("building a kind node's root filesystem needs mmdebstrap (apt-get install mmdebstrap): %w", err)
	}
	output, err := mmdebstrap(ctx, mmdebstrapArgs(os.DevNull, "--simulate", "--verbose"))
	if err != nil {
		return nil, fmt.Errorf("resolving the root filesystem's package versions (mmdebstrap --simulate): %w", err)
	}
	versions := parseInst(output)
	if len(versions) == 0 {
		return nil, fmt.Errorf("mmdebstrap --simulate named no package to install:\n%s", tail(output))
	}
	return versions, nil
}

// parseInst reads apt's simulated installs ("Inst runc (1.1.5+ds1-1+deb12u1
// Debian:12.15/oldstable, Debian-Security:12/oldstable-security [amd64])")
// as "name=version", each once, sorted.
func parseInst(out string) []string {
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "Inst ")
		if !ok {
			continue
		}
		name, rest, ok := strings.Cut(rest, " (")
		if !ok {
			continue
		}
		// "Inst a [old] (new …)" upgrades: the name's first field.
		name, _, _ = strings.Cut(name, " ")
		version, _, _ := strings.Cut(rest, " ")
		seen[name+"="+version] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// mmdebstrap runs mmdebstrap with args and returns what it wrote; where it
// fails, the error ends with the end of that.
func mmdebstrap(ctx context.Context, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, tail(output.String()))
	}
	return output.String(), nil
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

// Rootfs writes the node's Debian root filesystem as a tar archive into
// dir with mmdebstrap (Debian's package mmdebstrap), from Debian's
// packages at the versions they resolve to now, unless one of the same
// versions is there; it returns the archive's path and whether it was
// there. Where the archive cannot be asked (offline), the newest archive
// built before is used, and note says so.
func Rootfs(ctx context.Context, dir string) (path string, built bool, note string, err error) {
	versions, err := ResolveVersions(ctx)
	if err != nil {
		last, lerr := newestRootfs(dir)
		if lerr != nil || last == "" {
			return "", false, "", err
		}
		return last, true, fmt.Sprintf("Debian's archive does not answer; the node's root filesystem is the one built last, %s, whose packages may miss security updates: %v", filepath.Base(last), err), nil
	}
	out := filepath.Join(dir, "rootfs-"+DebianSuite+"-"+RootfsKey(versions)+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, true, "", nil
	}
	tmp := strings.TrimSuffix(out, ".tar") + ".partial.tar" // mmdebstrap writes the format its name says
	if _, err := mmdebstrap(ctx, mmdebstrapArgs(tmp)); err != nil {
		os.Remove(tmp)
		return "", false, "", fmt.Errorf("mmdebstrap %s: %w", DebianSuite, err)
	}
	// The versions of the key, beside the archive, for whoever asks what
	// a node runs.
	if err := os.WriteFile(strings.TrimSuffix(out, ".tar")+".versions", []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		os.Remove(tmp)
		return "", false, "", err
	}
	return out, false, "", os.Rename(tmp, out)
}

// newestRootfs is the root filesystem archive in dir built last; "" where
// there is none.
func newestRootfs(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "rootfs-"+DebianSuite+"-*.tar"))
	if err != nil {
		return "", err
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".partial.tar") })
	var newest string
	var at time.Time
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(at) {
			newest, at = f, fi.ModTime()
		}
	}
	return newest, nil
}

// busyboxPaths are where Debian's busybox-static puts its binary in a
// root filesystem, with /bin merged into /usr/bin or not.
var busyboxPaths = []string{"usr/bin/busybox", "bin/busybox"}

// Busybox writes the static busybox of a root filesystem archive (Debian's
// busybox-static, one of Packages) to file: the pause image's sh. A
// busybox that is not statically linked is refused: a pause image's
// program has no libraries beside it.
func Busybox(rootfs, file string) error {
	f, err := os.Open(rootfs)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the root filesystem %s has no busybox (%s): Debian's busybox-static is one of its packages", rootfs, strings.Join(busyboxPaths, ", "))
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", rootfs, err)
		}
		if h.Typeflag != tar.TypeReg || !slices.Contains(busyboxPaths, strings.TrimPrefix(path.Clean(h.Name), "./")) {
			continue
		}
		tmp := file + ".partial"
		out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = ociimage.CheckStatic(tmp)
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("the busybox of %s: %w", rootfs, err)
		}
		return os.Rename(tmp, file)
	}
}
