// Package build builds the dralab binary from the module the caller runs in,
// so that `go run mage.go lab:up` works on a fresh clone with nothing
// installed. The Go build cache makes a second build take seconds.
package build

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// KubernetesVersion is the Kubernetes release the lab is built from; the
// components report it as their version.
const KubernetesVersion = "v1.37.2"

// EnvBinary names a prebuilt dralab binary to use instead of building one.
const EnvBinary = "DRALAB_BINARY"

// LDFlags stamps the Kubernetes version into the components and strips
// debug information, which makes a warm re-link take about a minute
// instead of four.
func LDFlags() string {
	const pkg = "k8s.io/component-base/version"
	return strings.Join([]string{
		"-s", "-w",
		"-X", pkg + ".gitVersion=" + KubernetesVersion,
		"-X", pkg + ".gitMajor=1",
		"-X", pkg + ".gitMinor=37",
		"-X", pkg + ".gitTreeState=clean",
	}, " ")
}

// Dralab returns the path of an up-to-date dralab binary: $DRALAB_BINARY
// when set, else one built into the user's cache directory.
func Dralab(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return filepath.Abs(p)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, "dralab", "bin", "dralab")
	return out, Go(ctx, out, "github.com/dralab/dralab/cmd/dralab")
}

// Go builds a main package of this module into out.
func Go(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", LDFlags(), "-o", out, pkg)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, output.String())
	}
	return nil
}
