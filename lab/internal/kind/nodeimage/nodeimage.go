// Package nodeimage builds the node image of a kind lab without any
// registry: a Debian root filesystem from Debian's packages (Rootfs), kind's
// base files read from the sigs.k8s.io/kind module, the lab's Kubernetes
// built from Go modules (the kube binary: the node's kubelet, kubeadm and
// kubectl, and the control plane's images), containerd and crictl built
// from theirs, and the images the node imports when it starts (the control
// plane's, the pause image, the lab's driver). The result is an OCI
// archive that `podman load`, `docker load` and `nerdctl load` take, named
// for a digest of everything that went into it, so that the same inputs
// are built once.
package nodeimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ociimage"
)

// KubernetesVersion is the Kubernetes the node image runs: the lab's.
const KubernetesVersion = build.KubernetesVersion

// The images kubeadm 1.37 names for the control plane and the sandbox
// (k8s.io/kubernetes/cmd/kubeadm/app/constants: kube's tests check), and
// the sandbox image kind's containerd configuration names.
const (
	Registry         = "registry.k8s.io"
	EtcdImageTag     = "3.7.0-0"
	PauseImageTag    = "3.10.2"
	KindSandboxImage = Registry + "/pause:3.10"
)

// controlPlane are the control plane's components, each an image of
// Registry named for it, all the one kube binary over the root filesystem
// (kube-proxy runs the root filesystem's iptables).
var controlPlane = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// nodeCommands are the node's own commands, links to kube where kind's
// units and kubeadm look for them.
var nodeCommands = []string{"kubelet", "kubeadm", "kubectl"}

// Inputs are what a node image is built from.
type Inputs struct {
	// Rootfs is the Debian root filesystem (Rootfs writes it): the lowest
	// layer of the node image and of the control plane's image.
	Rootfs string
	// KindFiles is kind's base image files, images/base/files of the
	// sigs.k8s.io/kind module (KindFilesDir finds them).
	KindFiles string
	// Kube is the kube binary, stamped with KubernetesVersion.
	Kube string
	// Containerd is a directory with containerd, containerd-shim-runc-v2
	// and ctr (build.Containerd).
	Containerd string
	// Crictl is the crictl binary.
	Crictl string
	// Busybox is the root filesystem's static busybox: the pause image is
	// its sh.
	Busybox string
	// Note says what the user should know of the inputs (a root
	// filesystem built earlier, used offline); empty: nothing.
	Note string
	// Images are image archives the node imports when it starts, beside
	// its own (the lab's driver image).
	Images []string
}

// files are every input file, by a name that says what it is, for the
// image's digest.
func (in Inputs) files() (map[string]string, error) {
	out := map[string]string{"rootfs": in.Rootfs, "kube": in.Kube, "crictl": in.Crictl, "busybox": in.Busybox}
	for _, b := range containerdBinaries {
		out["containerd/"+b] = filepath.Join(in.Containerd, b)
	}
	for i, img := range in.Images {
		out[fmt.Sprintf("image/%d", i)] = img
	}
	err := filepath.WalkDir(in.KindFiles, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(in.KindFiles, p)
		out["kind/"+filepath.ToSlash(rel)] = p
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kind's base files: %w", err)
	}
	return out, nil
}

var containerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// Digest is a digest of the inputs' contents and of this package's
// recipe: the node image's name ends with it.
func (in Inputs) Digest() (string, error) {
	files, err := in.files()
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "recipe %d\n", recipeVersion)
	for _, n := range names {
		f, err := os.Open(files[n])
		if err != nil {
			return "", fmt.Errorf("node image input %s: %w", n, err)
		}
		fmt.Fprintf(h, "%s\n", n)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("node image input %s: %w", n, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// recipeVersion changes whenever Build lays out the image differently, so
// that an image of the same inputs is built again.
const recipeVersion = 2

// Repository is the node images' repository: the lab's own, which no
// registry serves.
const Repository = "dralab.dev/kind-node"

// Name is the node image's reference for inputs of digest sum.
func Name(sum string) string { return Repository + ":" + KubernetesVersion + "-" + sum[:12] }

// IsLabs tells whether image is a node image of the lab's own, built by
// Build: it has no kindnet and no CoreDNS image, whose images come from a
// registry (its nodes' network is its own CNI configuration).
func IsLabs(image string) bool { return strings.HasPrefix(image, Repository+":") }

// Built is a node image written by Build.
type Built struct {
	// Name is the image's reference; Archive its OCI archive.
	Name, Archive string
	// Reused: the archive was there from an earlier build of the same
	// inputs.
	Reused bool
}

// Build writes the node image of in into dir, as kind-node-<digest>.tar,
// unless it is there already, and removes the archives of earlier inputs.
func Build(ctx context.Context, in Inputs, dir string) (Built, error) {
	sum, err := in.Digest()
	if err != nil {
		return Built{}, err
	}
	b := Built{Name: Name(sum), Archive: filepath.Join(dir, "kind-node-"+sum[:12]+".tar")}
	if _, err := os.Stat(b.Archive); err == nil {
		b.Reused = true
		return b, nil
	}
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return Built{}, err
	}
	defer os.RemoveAll(work)
	img, err := in.nodeImage(ctx, work)
	if err != nil {
		return Built{}, err
	}
	img.Names = []string{b.Name}
	tmp := filepath.Join(work, "node.tar")
	if err := img.WriteArchive(tmp); err != nil {
		return Built{}, fmt.Errorf("writing the node image: %w", err)
	}
	if err := os.Rename(tmp, b.Archive); err != nil {
		return Built{}, err
	}
	// An image of earlier inputs is no lab's any more: hundreds of MB each.
	earlier, _ := filepath.Glob(filepath.Join(dir, "kind-node-*.tar"))
	for _, e := range earlier {
		if e != b.Archive {
			os.Remove(e)
		}
	}
	return b, nil
}

// nodeImage lays out the node image, writing what it carries that is not
// an input (its images, containerd's base spec) into work.
func (in Inputs) nodeImage(ctx context.Context, work string) (*ociimage.Image, error) {
	img := &ociimage.Image{
		Base:     []string{in.Rootfs},
		Files:    map[string]string{},
		Modes:    map[string]os.FileMode{},
		Symlinks: map[string]string{},
		// What kind's node containers expect: its entrypoint before
		// systemd, which stops on SIGRTMIN+3 and knows it is in a
		// container.
		Entrypoint: []string{"/usr/local/bin/entrypoint", "/sbin/init"},
		Env:        []string{"container=docker"},
		StopSignal: "SIGRTMIN+3",
	}
	files, err := in.files()
	if err != nil {
		return nil, err
	}
	for name, p := range files {
		if rel, ok := strings.CutPrefix(name, "kind/"); ok {
			// The module cache's files are read-only: the modes are the
			// ones kind's base image gives them.
			img.Files["/"+rel] = p
			img.Modes["/"+rel] = 0o644
			if strings.HasPrefix(rel, "usr/local/bin/") || strings.HasPrefix(rel, "kind/bin/") {
				img.Modes["/"+rel] = 0o755
			}
		}
	}
	img.Files["/usr/local/bin/kube"] = in.Kube
	for _, c := range nodeCommands {
		img.Symlinks["/usr/bin/"+c] = "/usr/local/bin/kube"
	}
	for _, b := range containerdBinaries {
		img.Files["/usr/local/bin/"+b] = filepath.Join(in.Containerd, b)
	}
	img.Files["/usr/local/bin/crictl"] = in.Crictl
	// Debian's CNI plugins, where containerd and the kubelet look.
	for _, p := range cniPlugins {
		img.Symlinks["/opt/cni/bin/"+p] = "/usr/lib/cni/" + p
	}
	spec, err := in.criBaseSpec(ctx, work)
	if err != nil {
		return nil, err
	}
	img.Files["/etc/containerd/cri-base.json"] = spec
	generated := map[string]string{
		"/kind/version":                                                  KubernetesVersion + "\n",
		"/etc/systemd/system/" + importUnit:                              importService,
		"/etc/systemd/system/" + podnetUnit:                              podnetService,
		"/etc/systemd/system/containerd.service.d/20-dralab-limits.conf": limitsDropIn,
	}
	for p, content := range generated {
		f := filepath.Join(work, "files", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			return nil, err
		}
		img.Files[p] = f
	}
	// The units kind's base image enables, and the lab's image import.
	for _, u := range []string{"kubelet.service", "containerd.service", "undo-mount-hacks.service", importUnit, podnetUnit} {
		img.Symlinks["/etc/systemd/system/multi-user.target.wants/"+u] = "/etc/systemd/system/" + u
	}
	images, err := in.writeImages(filepath.Join(work, "images"))
	if err != nil {
		return nil, err
	}
	maps.Copy(img.Files, images)
	return img, nil
}

// cniPlugins are the CNI plugins the node's network configuration uses.
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap", "ptp"}

// imagesDir is where the node image keeps the archives it imports when it
// starts.
const imagesDir = "/kind/images"

// writeImages writes the control plane's image and the pause image into
// dir; it returns every archive the node imports, its own and the extra
// images, by its path in the node image.
func (in Inputs) writeImages(dir string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cp := &ociimage.Image{
		Base:     []string{in.Rootfs},
		Files:    map[string]string{"/usr/local/bin/kube": in.Kube},
		Symlinks: map[string]string{"/usr/local/bin/etcd": "kube"},
		Env:      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Names:    []string{Registry + "/etcd:" + EtcdImageTag},
	}
	for _, c := range controlPlane {
		cp.Symlinks["/usr/local/bin/"+c] = "kube"
		cp.Names = append(cp.Names, Registry+"/"+c+":"+KubernetesVersion)
	}
	pause := ociimage.Pause(in.Busybox, Registry+"/pause:"+PauseImageTag, KindSandboxImage)
	out := map[string]string{}
	for name, img := range map[string]*ociimage.Image{"control-plane.tar": cp, "pause.tar": pause} {
		a := filepath.Join(dir, name)
		if err := img.WriteArchive(a); err != nil {
			return nil, fmt.Errorf("the node's %s: %w", name, err)
		}
		out[path.Join(imagesDir, name)] = a
	}
	// The extra images go into the node image from where they are.
	for i, src := range in.Images {
		out[path.Join(imagesDir, fmt.Sprintf("extra-%d.tar", i))] = src
	}
	return out, nil
}

// criBaseSpec writes the runtime spec containerd starts each container
// from: ctr's default, with kind's hook that mounts the node's product
// files, and without rlimits (a container inherits its node's).
func (in Inputs) criBaseSpec(ctx context.Context, work string) (string, error) {
	ctr := filepath.Join(in.Containerd, "ctr")
	out, err := exec.CommandContext(ctx, ctr, "oci", "spec").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("%s oci spec: %w", ctr, err)
	}
	var spec map[string]any
	if err := json.Unmarshal(out, &spec); err != nil {
		return "", fmt.Errorf("%s oci spec: %w", ctr, err)
	}
	if process, ok := spec["process"].(map[string]any); ok {
		delete(process, "rlimits")
	}
	hooks, _ := spec["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
		spec["hooks"] = hooks
	}
	create, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(create, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(work, "cri-base.json")
	return p, os.WriteFile(p, data, 0o644)
}

// importUnit imports the node image's archives into containerd's k8s.io
// namespace before the kubelet starts, at every boot (an image already
// there is kept): the node's images come with it, none is pulled.
const importUnit = "dralab-import-images.service"

const importService = `[Unit]
Description=Import the node image's container images into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -euc 'for a in ` + imagesDir + `/*.tar; do /usr/local/bin/ctr --namespace=k8s.io images import "$a"; done'

[Install]
WantedBy=multi-user.target
`

// limitsDropIn keeps containerd's unit within a container's limits: raising
// a limit or lowering its OOM score needs CAP_SYS_RESOURCE, which a node
// container of some hosts lacks (the unit then fails to start at all).
const limitsDropIn = `[Service]
LimitNOFILE=16384
LimitNPROC=4096
LimitCORE=0
OOMScoreAdjust=0
`

// podnetUnit runs the node's pod network agent (podnet): the node's CNI
// configuration for its own pod range, and routes to the other nodes'.
const podnetUnit = "dralab-podnet.service"

const podnetService = `[Unit]
Description=The node's pod network: its pod range for CNI, routes to the other nodes' pods
After=network-online.target

[Service]
ExecStart=/usr/local/bin/kube dralab-podnet
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
`

// KindFilesDir is kind's base image files in the module cache of the
// sigs.k8s.io/kind module the lab is built with.
func KindFilesDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kind").Output()
	if err != nil {
		return "", fmt.Errorf("finding the sigs.k8s.io/kind module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "images", "base", "files")
	if _, err := os.Stat(filepath.Join(dir, "usr", "local", "bin", "entrypoint")); err != nil {
		return "", fmt.Errorf("kind's base files: %w", err)
	}
	return dir, nil
}
