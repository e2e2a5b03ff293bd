// Package scratchlab starts and deletes the embedded labs that test suites
// (e2e, conformance) run against: in a temporary state directory, so that a
// lab a person is using is left alone, with a short path, so that the
// nodes' plugin sockets stay under the 108-byte limit of a unix socket
// path.
package scratchlab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/internal/podresources"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// Start brings up an embedded lab of cfg under the given name.
func Start(ctx context.Context, cfg *config.Config, name string) (*lab.Lab, error) {
	cfg.Name = name
	bin, err := build.Dralab(ctx)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "dl-")
	if err != nil {
		return nil, err
	}
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin), lab.WithRetain(true), lab.WithOwner(os.Getpid()))
	if err != nil {
		return nil, err
	}
	if _, err := l.Up(ctx); err != nil {
		return l, fmt.Errorf("starting the %s lab: %w", name, err)
	}
	return l, nil
}

// Stop collects the lab's logs into $ARTIFACTS/<name>-logs when set,
// deletes the lab and its state directory.
func Stop(ctx context.Context, l *lab.Lab) error {
	if l == nil {
		return nil
	}
	st, _ := l.Status(ctx)
	if dir := os.Getenv("ARTIFACTS"); dir != "" && st != nil {
		_ = l.CollectLogs(ctx, filepath.Join(dir, st.Name+"-logs"))
	}
	err := l.Down(ctx)
	if st != nil {
		err = errors.Join(err, mounts.RemoveAll(filepath.Dir(st.StateDir)))
	}
	return err
}

// CommandEnv is the environment under which a command acts on the lab:
// the manifest's health commands (dralab gpu fail and heal) find it by
// its state root and name, and the dralab binary on the PATH.
func CommandEnv(ctx context.Context, l *lab.Lab) ([]string, error) {
	st, err := l.Status(ctx)
	if err != nil {
		return nil, err
	}
	bin, err := build.Dralab(ctx)
	if err != nil {
		return nil, err
	}
	return []string{
		"DRALAB_STATE_DIR=" + filepath.Dir(st.StateDir),
		lab.EnvLab + "=" + l.Config().Name,
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}, nil
}

// ClusterOptions are the conformance suite's cluster options on lab l: the
// health commands' environment (CommandEnv) and its nodes' podresources
// sockets, as the lab names them.
func ClusterOptions(ctx context.Context, l *lab.Lab) (cluster.Options, error) {
	env, err := CommandEnv(ctx, l)
	if err != nil {
		return cluster.Options{}, err
	}
	podResources := func(ctx context.Context, node string) (*podresourcesapi.ListPodResourcesResponse, error) {
		socket, err := l.PodResourcesSocket(node)
		if err != nil {
			return nil, err
		}
		return podresources.ListResponse(ctx, socket)
	}
	return cluster.Options{CommandEnv: env, PodResources: podResources}, nil
}
