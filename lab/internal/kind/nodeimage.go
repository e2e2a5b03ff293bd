package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	kindlog "sigs.k8s.io/kind/pkg/log"

	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/internal/kind/nodeimage"
	"github.com/dralab/dralab/lab/internal/kindcmd"
)

// NodeImageDir is where the node images of the lab's own Kubernetes and
// their inputs are kept: the user's cache directory, so that a second
// build of the same inputs is none.
func NodeImageDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "dralab", "kind-node"), nil
}

// NodeImage implements kindcmd.Backend: it builds the node image of the
// lab's own Kubernetes without a registry (lab/internal/kind/nodeimage),
// or finds it built, and loads it into the container engine that
// answers, unless that engine has it.
func (b *Backend) NodeImage(ctx context.Context, progress ui.Progress) (kindcmd.NodeImage, error) {
	dir, err := NodeImageDir()
	if err != nil {
		return kindcmd.NodeImage{}, err
	}
	step := func(name string, run func() error) error {
		done := progress(name)
		err := run()
		done(err)
		return err
	}
	in, err := nodeimage.Prepare(ctx, dir, step)
	if err != nil {
		return kindcmd.NodeImage{}, err
	}
	var built nodeimage.Built
	err = step("Writing the node image of Kubernetes "+nodeimage.KubernetesVersion+" (once for the same inputs)", func() (err error) {
		built, err = nodeimage.Build(ctx, in, dir)
		return err
	})
	if err != nil {
		return kindcmd.NodeImage{}, err
	}
	out := kindcmd.NodeImage{Name: built.Name, Archive: built.Archive, Reused: built.Reused}
	if st, err := os.Stat(built.Archive); err == nil {
		out.Size = st.Size()
	}
	_, engine, _, err := pickEngine(kindlog.NoopLogger{})
	if err != nil {
		out.Why = err.Error()
		return out, nil
	}
	out.Engine = engine
	return out, step("Loading it into "+engine, func() error { return loadImage(ctx, engine, built.Name, built.Archive) })
}

// loadImage loads an image archive into a container engine (docker,
// podman, nerdctl: each has `load -i` and `image inspect`), unless the
// engine has the image already.
func loadImage(ctx context.Context, engine, name, archive string) error {
	if exec.CommandContext(ctx, engine, "image", "inspect", name).Run() == nil {
		return nil
	}
	out, err := exec.CommandContext(ctx, engine, "load", "-i", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s load -i %s: %w: %s", engine, archive, err, strings.TrimSpace(string(out)))
	}
	if err := exec.CommandContext(ctx, engine, "image", "inspect", name).Run(); err != nil {
		return fmt.Errorf("%s load -i %s loaded no image %s: %s", engine, archive, name, strings.TrimSpace(string(out)))
	}
	return nil
}
