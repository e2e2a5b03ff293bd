package nodeimage

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/dralab/dralab/internal/build"
)

// KubePackage is the kube binary's package.
const KubePackage = "github.com/dralab/dralab/lab/internal/kind/nodeimage/kube"

// A Step runs one part of preparing a node image's inputs, named for the
// user's progress lines.
type Step func(name string, run func() error) error

// Prepare builds, or finds built, every input of the lab's node image in
// dir: the root filesystem (and its busybox, the pause image's), the kube binary (the Go build cache keeps a
// rebuild to a link), containerd, crictl and the lab's driver image,
// running each through step.
func Prepare(ctx context.Context, dir string, step Step) (Inputs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Inputs{}, err
	}
	in := Inputs{Containerd: dir, Kube: filepath.Join(dir, "kube")}
	steps := []struct {
		name string
		run  func() error
	}{
		{"Finding kind's base files in the sigs.k8s.io/kind module", func() (err error) {
			in.KindFiles, err = KindFilesDir(ctx)
			return err
		}},
		{"Building the node's Debian root filesystem (mmdebstrap, Debian's packages with their security updates; once per set of versions)", func() (err error) {
			if in.Rootfs, _, in.Note, err = Rootfs(ctx, dir); err != nil {
				return err
			}
			// The pause image's sh: the root filesystem's own static
			// busybox, not whatever the host has.
			in.Busybox = strings.TrimSuffix(in.Rootfs, ".tar") + ".busybox"
			if _, err := os.Stat(in.Busybox); err == nil {
				return nil
			}
			return Busybox(in.Rootfs, in.Busybox)
		}},
		{"Building kube, the node's Kubernetes " + KubernetesVersion + " (the first build compiles kubeadm, kube-proxy and kubectl: minutes)", func() error {
			return build.Go(ctx, in.Kube, KubePackage)
		}},
		{"Building containerd " + build.ContainerdVersion + " and crictl " + build.CrictlVersion, func() (err error) {
			if err := build.Containerd(ctx, dir); err != nil {
				return err
			}
			in.Crictl, err = build.Crictl(ctx, dir)
			return err
		}},
		{"Building the lab's driver image", func() error {
			a, err := build.DriverImage(ctx, dir)
			in.Images = []string{a}
			return err
		}},
	}
	for _, s := range steps {
		if err := step(s.name, s.run); err != nil {
			return Inputs{}, err
		}
	}
	return in, nil
}
