package kind

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster"
	kindexec "sigs.k8s.io/kind/pkg/exec"
	kindlog "sigs.k8s.io/kind/pkg/log"

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
	want := os.Getenv(EnvProvider)
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
