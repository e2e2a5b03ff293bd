// Package build builds the dralab binary from the module the caller runs in,
// so that `go run mage.go lab:up` works on a fresh clone with nothing
// installed. The Go build cache makes a second build take seconds.
package build

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/dralab/dralab/internal/ociimage"
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

// DriverBinary is the GPU driver's binary, which the lab runs beside each
// GPU node, found next to the dralab binary.
const DriverBinary = "dralab-driver"

// Dralab returns the path of an up-to-date dralab binary, with
// dralab-driver beside it: $DRALAB_BINARY when set, else both built into
// the user's cache directory; not even the go command is asked while the
// module's Fingerprint is the one they were built from.
func Dralab(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		for _, f := range []string{p, filepath.Join(filepath.Dir(p), DriverBinary)} {
			if _, err := os.Stat(f); err != nil {
				return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
			}
		}
		return filepath.Abs(p)
	}
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	bin, driver := filepath.Join(dir, "dralab"), filepath.Join(dir, DriverBinary)
	// Taken before the build, so that a change made while it runs makes
	// the next one build.
	stampFile := filepath.Join(dir, "dralab.fingerprint")
	fingerprint, fpErr := Fingerprint(ctx, "")
	if fpErr == nil && Fresh(stampFile, fingerprint, bin, driver) {
		return bin, nil
	}
	if err := goReporting(ctx, reporterFrom(ctx), dir+string(filepath.Separator), "github.com/dralab/dralab/cmd/dralab", "github.com/dralab/dralab/cmd/"+DriverBinary); err != nil {
		return bin, err
	}
	if fpErr == nil {
		if err := Record(stampFile, fingerprint, bin, driver); err != nil {
			klog.FromContext(ctx).Error(err, "Recording the dralab binary's fingerprint; the next lab:up asks the go command again")
		}
	}
	return bin, nil
}

// KindPackage is the kind backend's program (lab/internal/kindcmd): only
// kind labs need it, and only it links kind and Helm's install action.
const KindPackage = "github.com/dralab/dralab/lab/internal/kind/dralab-kind"

// Kind returns the path of an up-to-date dralab-kind, built into the
// user's cache directory beside the dralab binary.
func Kind(ctx context.Context) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "dralab-kind")
	return out, goReporting(ctx, reporterFrom(ctx), out, KindPackage)
}

// binDir is where the lab's programs are built: the user's cache
// directory.
func binDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "dralab", "bin")
	return dir, os.MkdirAll(dir, 0o755)
}

// Go builds main packages of this module into out, a file for one package
// or a directory (ending in a separator) for several.
func Go(ctx context.Context, out string, pkgs ...string) error {
	return goReporting(ctx, nil, out, pkgs...)
}

// goReporting is Go, telling report how far the build has come while it
// compiles (go build -v names each package it compiles); a build that
// finds everything in the Go build cache reports nothing.
func goReporting(ctx context.Context, report func(Progress), out string, pkgs ...string) error {
	env := append(os.Environ(), "CGO_ENABLED="+cgo(runtime.GOOS))
	return goBuild(ctx, report, "", env, []string{"-ldflags", LDFlags(), "-o", out}, pkgs)
}

// Compile compiles pkgs into the Go build cache, as go build run in dir
// with the caller's environment does (so that a later go build of the
// same packages, mage's, finds them there), telling the reporter ctx
// carries (WithReporter) how far it has come.
func Compile(ctx context.Context, dir string, pkgs ...string) error {
	return goBuild(ctx, reporterFrom(ctx), dir, os.Environ(), nil, pkgs)
}

// goBuild runs go build with args in dir (the current directory when
// empty), reporting to report, when not nil, the packages compiled.
func goBuild(ctx context.Context, report func(Progress), dir string, env, args, pkgs []string) error {
	args = append([]string{"build"}, args...)
	if report != nil {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = env
	// One writer for both streams, so that exec copies them in one
	// goroutine: a bytes.Buffer read into by one copy (ReadFrom) while
	// another writes to it loses the other's bytes, the compiler's errors.
	var output bytes.Buffer
	var w io.Writer = &output
	if report != nil {
		c := newCounter(ctx, report, dir, env, pkgs)
		defer c.stop()
		w = io.MultiWriter(&output, c)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, output.String())
	}
	return nil
}

// ContainerdVersion is the containerd the real node runs, built from its
// Go module.
const ContainerdVersion = "v2.4.2"

// Containerd builds containerd, its runc shim and ctr into dir (static,
// without btrfs), unless they are there already.
func Containerd(ctx context.Context, dir string) error {
	const mod = "github.com/containerd/containerd/v2/cmd/"
	missing := false
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	return goInstall(ctx, dir, []string{"-tags", "no_btrfs"},
		mod+"containerd@"+ContainerdVersion, mod+"containerd-shim-runc-v2@"+ContainerdVersion, mod+"ctr@"+ContainerdVersion)
}

// CrictlVersion is the crictl a kind lab's node carries, built from its Go
// module.
const CrictlVersion = "v1.37.0"

// Crictl builds crictl into dir (static), unless it is there already, and
// returns its path.
func Crictl(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "crictl")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	return out, goInstall(ctx, dir, nil, "sigs.k8s.io/cri-tools/cmd/crictl@"+CrictlVersion)
}

// goInstall runs go install of pkgs (pkg@version: module-aware, outside
// this module) into dir, static.
func goInstall(ctx context.Context, dir string, flags []string, pkgs ...string) error {
	args := append(append([]string{"install"}, flags...), "-ldflags", "-s -w")
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, output.String())
	}
	return nil
}

// The driver's image, as the chart names it (repository and tag; the tag
// is the chart's appVersion).
const (
	DriverImageRepository = "dralab.dev/dralab-driver"
	DriverImageTag        = "0.1.0"
)

// DriverImage builds the driver and writes its image as an OCI archive in
// dir (for `kind load image-archive`, `docker load` or `ctr images
// import`), without Docker or a registry. It returns the archive's path.
// The driver is built with cgo, as on the lab's own nodes, so that its
// NVML inventory (go-nvml, mock servers included) is in it: the image
// carries the C libraries it links, this machine's, at their paths.
func DriverImage(ctx context.Context, dir string) (string, error) {
	img, err := driverImage(ctx, dir)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "dralab-driver-image.tar")
	return archive, img.WriteArchive(archive)
}

// driverImage builds the driver in dir and says what its image holds.
func driverImage(ctx context.Context, dir string) (*ociimage.Image, error) {
	bin := filepath.Join(dir, "dralab-driver-image-bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", "-s -w", "-o", bin, "github.com/dralab/dralab/cmd/"+DriverBinary)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo(runtime.GOOS))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	files := map[string]string{"/dralab-driver": bin}
	libs, err := sharedLibraries(ctx, bin)
	if err != nil {
		return nil, err
	}
	for _, lib := range append(libs, nvmlNeeds(libs)...) {
		files[lib] = lib
	}
	return &ociimage.Image{
		Names:      []string{DriverImageRepository + ":" + DriverImageTag},
		Files:      files,
		Entrypoint: []string{"/dralab-driver"},
	}, nil
}

// cgo is CGO_ENABLED's value for a build for goos. On Linux the driver's
// NVML inventory, mock servers included, needs cgo (and a C compiler);
// NVML itself is loaded only at run time. Elsewhere go-nvml is pure Go
// (and NVML absent), so no C compiler is needed.
func cgo(goos string) string {
	if goos == "linux" {
		return "1"
	}
	return "0"
}

// nvmlNeeds are the C libraries NVIDIA's libnvidia-ml.so.1, which the
// driver opens at run time from the node's driver root, loads beside those
// the driver links: the C library's libdl, libpthread, libm and librt,
// from the directory of the libc among libs, where they exist there.
func nvmlNeeds(libs []string) []string {
	var out []string
	for _, lib := range libs {
		if filepath.Base(lib) != "libc.so.6" {
			continue
		}
		for _, name := range []string{"libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1"} {
			p := filepath.Join(filepath.Dir(lib), name)
			if _, err := os.Stat(p); err == nil && !slices.Contains(libs, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// sharedLibraries are the paths of the shared libraries a binary loads at
// start, its dynamic loader first, as ldd lists them; none for a static
// binary.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "/"):
			libs = append(libs, fields[2])
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			libs = append(libs, fields[0])
		}
	}
	return libs, nil
}
