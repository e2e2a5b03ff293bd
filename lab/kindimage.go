package lab

import (
	"context"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/internal/kindcmd"
)

// KindNodeImage is a kind node image of the lab's own Kubernetes.
type KindNodeImage struct {
	// Name is its reference; Archive its OCI archive (which `docker
	// load`, `podman load` and `nerdctl load` take), of Size bytes.
	Name    string
	Archive string
	Size    int64
	// Reused: the archive was built before, of the same inputs.
	Reused bool
	// Engine is the container engine it is loaded into; "" where none
	// answers, and Why says what each one said.
	Engine string
	Why    string
}

// BuildKindNodeImage builds the kind node image of the lab's own
// Kubernetes without any registry, or finds it built (the same inputs are
// built once), and loads it into the container engine that answers,
// reporting each step to the WithProgress option's reporter. A kind lab
// whose nodeImage (or $DRALAB_KIND_NODE_IMAGE) names it runs exactly the
// Kubernetes the embedded lab runs.
func BuildKindNodeImage(ctx context.Context, opts ...Option) (KindNodeImage, error) {
	o := options{progress: ui.NoProgress}
	for _, opt := range opts {
		opt(&o)
	}
	root, err := stateRoot(opts)
	if err != nil {
		return KindNodeImage{}, err
	}
	img, err := kindcmd.New(root, build.Kind).NodeImage(ctx, o.progress)
	return KindNodeImage{Name: img.Name, Archive: img.Archive, Size: img.Size, Reused: img.Reused, Engine: img.Engine, Why: img.Why}, err
}
