package kind

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster"
	kindexec "sigs.k8s.io/kind/pkg/exec"
	kindlog "sigs.k8s.io/kind/pkg/log"

	"github.com/dralab/dralab/lab/internal/kindcmd"
	"github.com/dralab/dralab/lab/status"
)

// EnvProvider names the container engine kind runs its nodes on, as
// kind's own CLI reads it: docker, podman or nerdctl.
const EnvProvider = "KIND_EXPERIMENTAL_PROVIDER"

// engines are the container engines kind runs nodes on, in the order they
// are tried.
var engines = []struct {
	name   string
	option func() cluster.ProviderOption
}{
	{"docker", cluster.ProviderWithDocker},
	{"podman", cluster.ProviderWithPodman},
	{"nerdctl", func() cluster.ProviderOption { return cluster.ProviderWithNerdctl("") }},
}

// pickEngine returns kind's provider on the first container engine that
// answers — the one $KIND_EXPERIMENTAL_PROVIDER names, else docker, podman
// and nerdctl in turn — with its name and the clusters it runs. An engine
// answers when its command is installed and lists containers: a docker
// command without a running daemon is no engine, and podman is tried next
// (kind's own detection stops at the docker command). When none answers,
// the error says what each one said.
func pickEngine(logger kindlog.Logger) (*cluster.Provider, string, []string, error) {
	return pickEngineNamed(logger, os.Getenv(EnvProvider))
}

// pickEngineNamed is pickEngine on the engine named ("": the first that
// answers).
func pickEngineNamed(logger kindlog.Logger, want string) (*cluster.Provider, string, []string, error) {
	var tried []string
	for _, e := range engines {
		if want != "" && e.name != want {
			continue
		}
		if _, err := exec.LookPath(e.name); err != nil {
			tried = append(tried, e.name+": not installed")
			continue
		}
		p := cluster.NewProvider(e.option(), cluster.ProviderWithLogger(logger))
		clusters, err := p.List()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", e.name, withOutput(err)))
			continue
		}
		return p, e.name, clusters, nil
	}
	if want != "" && len(tried) == 0 {
		return nil, "", nil, fmt.Errorf("%w: $%s=%q is no engine kind knows (docker, podman, nerdctl)", status.ErrNoEngine, EnvProvider, want)
	}
	return nil, "", nil, fmt.Errorf("%w: %s; the embedded backend (the default) needs none", status.ErrNoEngine, strings.Join(tried, "; "))
}

// outputTail is how many lines of a failed command's output an error
// keeps.
const outputTail = 10

// withOutput adds to an error of kind's the tail of the output of the
// command that failed, which kind's own message leaves out.
func withOutput(err error) error {
	var run *kindexec.RunError
	if !errors.As(err, &run) || len(run.Output) == 0 {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(run.Output)), "\n")
	if len(lines) > outputTail {
		lines = lines[len(lines)-outputTail:]
	}
	return fmt.Errorf("%w: %s", err, strings.Join(lines, " | "))
}

// engineFile is where a kind lab records the engine its nodes run on, in
// its state directory.
func engineFile(root, name string) string {
	return filepath.Join(filepath.Dir(kindcmd.Kubeconfig(root, name)), "engine")
}

// recordedEngine is the engine a lab's nodes run on, as Up recorded it;
// "" for a lab that recorded none (made before labs recorded it).
func recordedEngine(root, name string) string {
	data, err := os.ReadFile(engineFile(root, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// labEngine returns kind's provider on the engine the lab's nodes run on:
// the one it recorded, else the first that answers. A lab whose engine
// does not answer gets an error naming it, even where another engine
// answers: its nodes are not there, and kind's delete would find nothing
// to delete.
func labEngine(root, name string) (*cluster.Provider, string, []string, error) {
	rec := recordedEngine(root, name)
	if rec == "podman" {
		// Every podman command for the lab runs with its configuration.
		if err := usePodmanConf(filepath.Dir(kindcmd.Kubeconfig(root, name))); err != nil {
			return nil, rec, nil, err
		}
	}
	if rec == "" {
		return pickEngine(kindlog.NoopLogger{})
	}
	if env := os.Getenv(EnvProvider); env != "" && env != rec {
		return nil, rec, nil, fmt.Errorf("%w: lab %s runs on %s, and $%s names %s: unset it, or bring the lab down on %s first", ErrOtherEngine, name, rec, EnvProvider, env, rec)
	}
	p, engine, clusters, err := pickEngineNamed(kindlog.NoopLogger{}, rec)
	if err != nil {
		return nil, rec, nil, fmt.Errorf("lab %s runs on %s, which does not answer now; its nodes are there, not on any other engine: %w", name, rec, err)
	}
	return p, engine, clusters, nil
}

// ErrOtherEngine means a kind lab runs on another engine than the one
// asked for.
var ErrOtherEngine = errors.New("the lab runs on another container engine")
