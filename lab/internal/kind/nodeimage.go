package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"
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
	if in.Note != "" {
		progress(in.Note)(nil)
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
	if err := step("Loading it into "+engine, func() error { return loadImage(ctx, engine, built.Name, built.Archive) }); err != nil {
		return out, err
	}
	prune(ctx, engine, dir, built)
	// The image lab:up runs where kind's cannot be pulled.
	if err := os.WriteFile(filepath.Join(dir, currentFile), []byte(built.Name+"\n"), 0o644); err != nil {
		return out, err
	}
	return out, nil
}

// currentFile names, in the node images' directory, the last one built
// and loaded.
const currentFile = "current"

// prune removes the lab's node images of other inputs, which this one
// replaces: their archives, and their images in the engine where no
// container runs them (the engine refuses to remove those).
func prune(ctx context.Context, engine, dir string, keep nodeimage.Built) {
	logger := klog.FromContext(ctx)
	archives, _ := filepath.Glob(filepath.Join(dir, "kind-node-*.tar"))
	for _, a := range archives {
		if a != keep.Archive {
			if err := os.Remove(a); err != nil {
				logger.Info("Keeping an old node image archive", "path", a, "err", err)
			}
		}
	}
	for _, name := range labsImages(ctx, engine) {
		if name != keep.Name {
			if out, err := exec.CommandContext(ctx, engine, "image", "rm", name).CombinedOutput(); err != nil {
				logger.Info("Keeping an old node image", "image", name, "err", strings.TrimSpace(string(out)))
			}
		}
	}
}

// labsImages are the node images of the lab's own Kubernetes the engine
// holds, of the Kubernetes the lab runs: the last one kind:nodeImage built
// first.
func labsImages(ctx context.Context, engine string) []string {
	out, err := exec.CommandContext(ctx, engine, "images", nodeimage.Repository, "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		return nil
	}
	var current string
	if dir, err := NodeImageDir(); err == nil {
		data, _ := os.ReadFile(filepath.Join(dir, currentFile))
		current = strings.TrimSpace(string(data))
	}
	var names []string
	for _, name := range strings.Fields(string(out)) {
		if strings.HasPrefix(name, nodeimage.Repository+":"+nodeimage.KubernetesVersion+"-") {
			names = append(names, name)
		}
	}
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case a == current:
			return -1
		case b == current:
			return 1
		}
		return 0
	})
	return names
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

// ensureNodeImage makes sure the engine has a kind lab's node image,
// pulling it where it has not (as kind would). Where it cannot be pulled —
// no registry reachable, an image of the lab's own not loaded — the error
// says so in one line and names the target that builds the lab's own.
//
// Where the image is the default (kind's, chosen by no one) and cannot be
// pulled, a node image of the lab's own Kubernetes the engine holds
// (kind:nodeImage) is the one to run: it is returned, with a line saying
// so.
func ensureNodeImage(ctx context.Context, engine, image string, isDefault bool) (use, note string, err error) {
	if exec.CommandContext(ctx, engine, "image", "inspect", pullable(image)).Run() == nil {
		return image, "", nil
	}
	out, err := exec.CommandContext(ctx, engine, "pull", pullable(image)).CombinedOutput()
	if err == nil {
		return image, "", nil
	}
	// The last line's last clause: "no such host", "manifest unknown".
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	why := lines[len(lines)-1]
	if i := strings.LastIndex(why, ": "); i >= 0 {
		why = why[i+2:]
	}
	if own := labsImages(ctx, engine); isDefault && len(own) > 0 {
		return own[0], fmt.Sprintf("The node image %s cannot be pulled (%s): running the lab's own, %s", image, why, own[0]), nil
	}
	return "", "", fmt.Errorf("the node image %s is not in %s and cannot be pulled (%s): build one of the lab's own Kubernetes without a registry with `go run mage.go kind:nodeImage`", image, engine, why)
}

// pullable is an image reference every engine pulls as kind does: with
// Docker Hub's host where it names none (podman resolves no short names
// without a configured search list), and without its tag where a digest
// pins it (podman refuses both).
func pullable(image string) string {
	if first, _, ok := strings.Cut(image, "/"); !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
		image = "docker.io/" + image
	}
	if name, digest, ok := strings.Cut(image, "@"); ok {
		if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
			name = name[:i]
		}
		image = name + "@" + digest
	}
	return image
}
