package lab

import (
	"context"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/internal/kindcmd"
)

// KindNodeImage is a kind node image of the lab's own Kubernetes: its
// name, its OCI archive (which `docker load`, `podman load` and
// `nerdctl load` take), and the engine it is loaded into.
type KindNodeImage = kindcmd.NodeImage

// BuildKindNodeImage builds the kind node image of the lab's own
// Kubernetes without any registry, or finds it built (the same inputs are
// built once), and loads it into the container engine that answers,
// telling progress each step. A kind lab whose nodeImage (or
// $DRALAB_KIND_NODE_IMAGE) names it runs exactly the Kubernetes the
// embedded lab runs.
func BuildKindNodeImage(ctx context.Context, progress ui.Progress, opts ...Option) (KindNodeImage, error) {
	root, err := stateRoot(opts)
	if err != nil {
		return KindNodeImage{}, err
	}
	return kindcmd.New(root, build.Kind).NodeImage(ctx, progress)
}
