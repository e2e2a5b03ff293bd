package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// EnvLab names an existing lab for the commands that act on one (lab:down,
// lab:status, lab:kubeconfig), like `kind delete cluster --name`.
const EnvLab = "DRALAB_LAB"

// ErrAmbiguous means several labs exist and the command named none.
var ErrAmbiguous = errors.New("several labs exist on this machine")

// ErrNoSuchLab means no lab of the given name exists.
var ErrNoSuchLab = errors.New("no such lab")

// recordedConfig is the configuration a lab records in its state
// directory, whatever its backend.
func recordedConfig(root, name string) string { return filepath.Join(root, name, "config.json") }

// Names lists the labs whose state lies in the state root (WithStateRoot,
// else the default root), sorted.
func Names(opts ...Option) ([]string, error) {
	root, err := stateRoot(opts)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing labs in %s: %w", root, err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(recordedConfig(root, e.Name())); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// List returns the status of every lab in the state root.
func List(ctx context.Context, opts ...Option) ([]*Status, error) {
	names, err := Names(opts...)
	if err != nil {
		return nil, err
	}
	var out []*Status
	for _, name := range names {
		l, err := Open(name, opts...)
		if err != nil {
			return nil, err
		}
		st, err := l.Status(ctx)
		if err != nil {
			st = &Status{Name: name, Backend: l.Backend(), Phase: "Unknown", Message: err.Error()}
		}
		out = append(out, st)
	}
	return out, nil
}

// Open returns the existing lab of that name, with the configuration it
// recorded when it was created.
func Open(name string, opts ...Option) (*Lab, error) {
	root, err := stateRoot(opts)
	if err != nil {
		return nil, err
	}
	file := recordedConfig(root, name)
	if _, err := os.Stat(file); err != nil {
		names, _ := Names(opts...)
		return nil, fmt.Errorf("%w %q in %s (labs: %s)", ErrNoSuchLab, name, root, listOrNone(names))
	}
	cfg, err := config.Load(file)
	if err != nil {
		return nil, fmt.Errorf("lab %q: %w", name, err)
	}
	l, err := New(append(slices.Clone(opts), WithConfig(cfg))...)
	if err != nil {
		return nil, err
	}
	l.source = file
	return l, nil
}

// Existing returns the lab that a command acting on an existing lab means:
// the one named by $DRALAB_LAB; else that of the configuration given
// (WithConfig, WithConfigFile, $DRALAB_CONFIG), as recorded when it was
// created where it exists (its backend, whatever $DRALAB_BACKEND says
// now); else the only lab there
// is, or the default lab when there is none. With several labs and none
// named it fails with ErrAmbiguous, naming them.
func Existing(opts ...Option) (*Lab, error) {
	if name := os.Getenv(EnvLab); name != "" {
		return Open(name, opts...)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.cfg != nil || o.configFile != "" || os.Getenv(EnvConfig) != "" {
		l, err := New(opts...)
		if err != nil {
			return nil, err
		}
		// A lab of that name exists: it is the one its creation recorded
		// (its backend above all), whatever the environment says now. A
		// kind lab brought down as an embedded one would lose its state
		// and leave its nodes running.
		root, err := stateRoot(opts)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(recordedConfig(root, l.Config().Name)); err == nil {
			return Open(l.Config().Name, opts...)
		}
		return l, nil
	}
	names, err := Names(opts...)
	if err != nil {
		return nil, err
	}
	switch len(names) {
	case 0:
		return New(opts...)
	case 1:
		return Open(names[0], opts...)
	}
	return nil, fmt.Errorf("%w: %s; name one with %s, e.g. %s=%s go run mage.go lab:down",
		ErrAmbiguous, strings.Join(names, ", "), EnvLab, EnvLab, names[0])
}

func stateRoot(opts []Option) (string, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.stateRoot != "" {
		return o.stateRoot, nil
	}
	return labstate.Root()
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// OfKubeconfig tells whether kubeconfig is the administrator kubeconfig of
// a running embedded lab of this machine whose API server is server, and
// gives that lab's state directory: a suite may act on such a cluster
// without asking (conformance's target.Request.Lab). Open takes the lab by
// the directory's base name in the state root that is its parent.
func OfKubeconfig(kubeconfig, server string) (dir string, ok bool) {
	return labstate.LabOf(kubeconfig, server)
}
