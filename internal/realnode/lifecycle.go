package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/internal/procid"
)

// RuncRoot is where runc keeps container state, inside the node directory.
func (p Paths) RuncRoot() string { return p.join("containerd", "runc") }

// ContainerdCommand runs containerd with the node's configuration; the
// shim and ctr are beside it in binDir, which goes first on its PATH.
func ContainerdCommand(binDir string, p Paths) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "containerd"), "--config", p.ContainerdConfig())
	cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	return cmd
}

// WaitContainerd waits until containerd answers on its socket.
func WaitContainerd(ctx context.Context, p Paths) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := net.Dial("unix", p.ContainerdSocket())
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("containerd did not answer on %s: %w", p.ContainerdSocket(), err)
	}
	return nil
}

// ImportImages imports the node's image archives into containerd's
// Kubernetes namespace.
func ImportImages(ctx context.Context, binDir string, p Paths) error {
	archives, err := filepath.Glob(filepath.Join(p.Images(), "*.tar"))
	if err != nil {
		return err
	}
	for _, a := range archives {
		if err := ImportArchive(ctx, binDir, p, a); err != nil {
			return err
		}
	}
	return nil
}

// ImportArchive imports one image archive (OCI or docker-archive) into the
// node's containerd, where the kubelet finds it without a registry.
func ImportArchive(ctx context.Context, binDir string, p Paths, archive string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctr"), "--address", p.ContainerdSocket(), "--namespace", "k8s.io", "images", "import", "--no-unpack=false", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// KubeletArgs runs the real kubelet (`dralab kubelet`) for the node.
func KubeletArgs(p Paths, name, kubeconfig string, labels map[string]string, taints []string, gates string, verbosity int) []string {
	args := []string{"kubelet",
		"--config=" + p.KubeletConfig(),
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + p.Node.KubeletRoot(),
		"--cert-dir=" + p.Node.CertDir(),
		"--hostname-override=" + name,
		"--v=" + strconv.Itoa(verbosity),
	}
	if gates != "" {
		// The lab's gates, "A=true,B=false", as every component has them.
		args = append(args, "--feature-gates="+gates)
	}
	var kv []string
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	if len(kv) > 0 {
		args = append(args, "--node-labels="+strings.Join(kv, ","))
	}
	if len(taints) > 0 {
		// key=value:Effect, as the kubelet's flag takes them.
		args = append(args, "--register-with-taints="+strings.Join(taints, ","))
	}
	return args
}

// RemovePods stops and removes every pod sandbox through the CRI, while
// containerd runs and the kubelet does not: containerd tears down each
// pod's network through CNI (veth, IPAM) and removes its containers.
func RemovePods(ctx context.Context, p Paths) error {
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + p.ContainerdSocket()).WithConnectionTimeout(5 * time.Second).Build(ctx)
	if err != nil {
		return err
	}
	defer rs.Close(ctx)
	sandboxes, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range sandboxes {
		if err := rs.StopPodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox %s: %w", sb.Id, err))
		}
		if err := rs.RemovePodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", sb.Id, err))
		}
	}
	return errors.Join(errs...)
}

// Cleanup undoes what the kubelet, containerd and runc did to the host,
// once they have stopped (or died): it kills leftover shims and containers,
// unmounts everything under the node directory, and removes what the
// node's host record says the node created: its cgroups, the CNI bridge,
// iptables chains and the kubelet's host paths. It needs nothing but the
// node directory, is idempotent, and safe on a node that never started.
// What it cannot remove is named in its error, with how to remove it.
func Cleanup(ctx context.Context, p Paths) error {
	logger := klog.FromContext(ctx)
	rec, err := ReadHostRecord(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	// Containers: runc state is under the node directory.
	if entries, err := os.ReadDir(filepath.Join(p.RuncRoot(), "k8s.io")); err == nil {
		for _, e := range entries {
			root := filepath.Join(p.RuncRoot(), "k8s.io")
			_ = exec.CommandContext(ctx, Runc, "--root", root, "kill", e.Name(), "KILL").Run()
			if out, err := exec.CommandContext(ctx, Runc, "--root", root, "delete", "--force", e.Name()).CombinedOutput(); err != nil {
				logger.V(1).Info("runc delete", "container", e.Name(), "err", err, "output", string(out))
			}
		}
	}
	// Shims: containerd's runc shims whose -address is the node's own
	// containerd socket, each signalled through its identity (a pidfd
	// opened before the check), never by a bare PID.
	for _, id := range Shims(p.ContainerdSocket()) {
		_ = id.Signal(syscall.SIGKILL)
	}
	// Mounts: innermost first.
	ms, err := mounts.Under(string(p.Node))
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range ms {
		if err := unmountDetached(m); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s (unmount it with: umount -l %s): %w", m, m, err))
		}
	}
	if err := rec.RecordBridge(p); err != nil {
		errs = append(errs, err)
	}
	if rec.Bridge != "" {
		if _, err := net.InterfaceByName(rec.Bridge); err == nil {
			if out, err := exec.CommandContext(ctx, "ip", "link", "delete", rec.Bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("deleting bridge %s (delete it with: ip link delete %s): %w: %s", rec.Bridge, rec.Bridge, err, out))
			}
		}
	}
	for _, d := range rec.CgroupDirs {
		errs = append(errs, removeCgroupTree(d)...)
	}
	errs = append(errs, removeChains(ctx, rec)...)
	errs = append(errs, removeKubeletPaths(rec)...)
	return errors.Join(errs...)
}

// removeKubeletPaths removes the kubelet's host paths the node created,
// by name, deepest first: the files the kubelet and the lab's driver put
// in the device-plugin directory, then the directory and its parent where
// the node created them and nothing else lies in them. A folder that holds
// what someone else put there stays, with what it holds.
func removeKubeletPaths(rec *HostRecord) []error {
	paths := slices.Clone(rec.PathsCreated)
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	var errs []error
	for _, path := range paths {
		err := os.Remove(path)
		if fi, serr := os.Lstat(path); err != nil && serr == nil && fi.IsDir() {
			if entries, rerr := os.ReadDir(path); rerr == nil && len(entries) > 0 {
				continue // holds what the node did not make: left
			}
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s, which the real node created (remove it with: rm %s): %w", path, path, err))
		}
	}
	return errs
}

// Shims lists the live containerd shims that serve the containerd at
// socket: an executable named containerd-shim*, with the argument
// "-address" followed by exactly that socket.
func Shims(socket string) []procid.ID {
	var out []procid.ID
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		id, err := procid.Of(pid)
		if err != nil || !strings.HasPrefix(filepath.Base(id.Executable), "containerd-shim") {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		for i := range len(args) - 1 {
			if args[i] == "-address" && args[i+1] == socket {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// ProcessesWith lists live (non-zombie) processes whose command line
// contains s.
func ProcessesWith(s string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(data), s) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func alive(pid int) bool {
	_, err := procid.Of(pid)
	return err == nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
