package nodeimage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dralab/dralab/internal/build"
)

// KubePackage is the kube binary's package.
const KubePackage = "github.com/dralab/dralab/lab/internal/kind/nodeimage/kube"

// Busybox is the static busybox of Debian's busybox-static on the host,
// the pause image's.
const Busybox = "/bin/busybox"

// A Step runs one part of preparing a node image's inputs, named for the
// user's progress lines.
type Step func(name string, run func() error) error

// Prepare builds, or finds built, every input of the lab's node image in
// dir: the root filesystem, the kube binary (the Go build cache keeps a
// rebuild to a link), containerd, crictl and the lab's driver image,
// running each through step.
func Prepare(ctx context.Context, dir string, step Step) (Inputs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Inputs{}, err
	}
	in := Inputs{Containerd: dir, Busybox: Busybox, Kube: filepath.Join(dir, "kube")}
	if _, err := os.Stat(Busybox); err != nil {
		return Inputs{}, fmt.Errorf("the pause image is Debian's static busybox (apt-get install busybox-static): %w", err)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"Finding kind's base files in the sigs.k8s.io/kind module", func() (err error) {
			in.KindFiles, err = KindFilesDir(ctx)
			return err
		}},
		{"Building the node's Debian root filesystem (mmdebstrap, Debian's packages; once)", func() (err error) {
			in.Rootfs, _, err = Rootfs(ctx, dir)
			return err
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
