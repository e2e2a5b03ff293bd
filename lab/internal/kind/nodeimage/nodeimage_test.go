package nodeimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeInputs are inputs of small files: a root filesystem of one file,
// kind's files of two, binaries that are text, and a ctr whose `oci spec`
// prints a spec with rlimits and a hook.
func fakeInputs(t *testing.T) Inputs {
	t.Helper()
	dir := t.TempDir()
	write := func(rel, content string, mode os.FileMode) string {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	tw.WriteHeader(&tar.Header{Name: "etc/debian_version", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("12.11"))
	tw.Close()
	in := Inputs{
		Rootfs:     write("rootfs.tar", rootfs.String(), 0o644),
		KindFiles:  filepath.Join(dir, "kind"),
		Kube:       write("kube", "kube binary", 0o755),
		Containerd: filepath.Join(dir, "containerd"),
		Crictl:     write("crictl", "crictl binary", 0o755),
		Busybox:    write("busybox", "busybox binary", 0o755),
		Images:     []string{write("driver.tar", "driver image", 0o644)},
	}
	// Read-only, as in the module cache.
	write("kind/usr/local/bin/entrypoint", "#!/bin/sh\n", 0o444)
	write("kind/kind/bin/mount-product-files.sh", "#!/bin/sh\n", 0o444)
	write("kind/etc/systemd/system/kubelet.service", "[Service]\n", 0o444)
	write("containerd/containerd", "containerd binary", 0o755)
	write("containerd/containerd-shim-runc-v2", "shim binary", 0o755)
	write("containerd/ctr", `#!/bin/sh
[ "$1 $2" = "oci spec" ] || exit 1
echo '{"ociVersion":"1.2.0","process":{"args":["sh"],"rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}]},"hooks":{"createContainer":[{"path":"/other"}]}}'
`, 0o755)
	return in
}

// layerFiles reads an OCI archive's image (its one manifest) into the
// headers and contents of its top layer, and its config.
func layerFiles(t *testing.T, archive string) (map[string]*tar.Header, map[string][]byte, ocispec.Image, []string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		data, _ := io.ReadAll(tr)
		blobs[h.Name] = data
	}
	var index ocispec.Index
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range index.Manifests {
		names = append(names, m.Annotations[ocispec.AnnotationRefName])
	}
	blob := func(d ocispec.Descriptor) []byte { return blobs["blobs/sha256/"+d.Digest.Encoded()] }
	var manifest ocispec.Manifest
	json.Unmarshal(blob(index.Manifests[0]), &manifest)
	var config ocispec.Image
	json.Unmarshal(blob(manifest.Config), &config)
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[len(manifest.Layers)-1])))
	if err != nil {
		t.Fatal(err)
	}
	headers, contents := map[string]*tar.Header{}, map[string][]byte{}
	lr := tar.NewReader(zr)
	for h, err := lr.Next(); err == nil; h, err = lr.Next() {
		data, _ := io.ReadAll(lr)
		headers["/"+strings.TrimSuffix(h.Name, "/")], contents["/"+h.Name] = h, data
	}
	return headers, contents, config, names
}

// A node image is kind's base files, the lab's binaries where kind's units
// and kubeadm look, containerd's base spec from its ctr (kind's hook
// added, rlimits gone), the units that start containerd, the kubelet and
// the image import, and the images the node imports: the control plane's
// (every component's name and etcd's on the kube binary), the pause image
// (kubeadm's name and kind's sandbox name), the lab's driver. Its name
// ends with its inputs' digest, and the same inputs are built once.
func TestBuild(t *testing.T) {
	ctx := context.Background()
	in := fakeInputs(t)
	out := t.TempDir()
	b, err := Build(ctx, in, out)
	if err != nil {
		t.Fatal(err)
	}
	if b.Reused || !strings.HasPrefix(b.Name, "dralab.dev/kind-node:v1.37.2-") {
		t.Errorf("built %+v", b)
	}
	headers, contents, config, names := layerFiles(t, b.Archive)
	if !slices.Equal(names, []string{b.Name}) || !slices.Equal(config.Config.Entrypoint, []string{"/usr/local/bin/entrypoint", "/sbin/init"}) ||
		config.Config.StopSignal != "SIGRTMIN+3" || !slices.Contains(config.Config.Env, "container=docker") || len(config.RootFS.DiffIDs) != 2 {
		t.Errorf("the node image %v: config %+v", names, config)
	}
	for p, mode := range map[string]int64{"/usr/local/bin/entrypoint": 0o755, "/kind/bin/mount-product-files.sh": 0o755, "/etc/systemd/system/kubelet.service": 0o644, "/usr/local/bin/kube": 0o755,
		"/usr/local/bin/containerd": 0o755, "/usr/local/bin/ctr": 0o755, "/usr/local/bin/crictl": 0o755, "/kind/version": 0o644} {
		if h := headers[p]; h == nil || h.Mode != mode {
			t.Errorf("%s: %+v, want a file of mode %o", p, h, mode)
		}
	}
	for link, target := range map[string]string{"/usr/bin/kubelet": "/usr/local/bin/kube", "/usr/bin/kubeadm": "/usr/local/bin/kube",
		"/opt/cni/bin/bridge": "/usr/lib/cni/bridge", "/etc/systemd/system/multi-user.target.wants/" + importUnit: "/etc/systemd/system/" + importUnit,
		"/etc/systemd/system/multi-user.target.wants/containerd.service": "/etc/systemd/system/containerd.service"} {
		if h := headers[link]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
			t.Errorf("%s: %+v, want a link to %s", link, h, target)
		}
	}
	if v := string(contents["/kind/version"]); v != "v1.37.2\n" {
		t.Errorf("/kind/version = %q", v)
	}
	var spec struct {
		Process map[string]any `json:"process"`
		Hooks   struct {
			CreateContainer []struct{ Path string } `json:"createContainer"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(contents["/etc/containerd/cri-base.json"], &spec); err != nil {
		t.Logf("%q", contents["/etc/containerd/cri-base.json"])
		t.Fatal(err)
	}
	if _, ok := spec.Process["rlimits"]; ok || len(spec.Hooks.CreateContainer) != 2 || spec.Hooks.CreateContainer[1].Path != "/kind/bin/mount-product-files.sh" {
		t.Errorf("cri-base.json: %+v", spec)
	}
	images := map[string][]string{}
	for p := range contents {
		if strings.HasPrefix(p, imagesDir+"/") && strings.HasSuffix(p, ".tar") {
			a := filepath.Join(t.TempDir(), "image.tar")
			os.WriteFile(a, contents[p], 0o644)
			if filepath.Base(p) == "extra-0.tar" {
				images[p] = []string{string(contents[p])}
				continue
			}
			_, _, _, n := layerFiles(t, a)
			images[p] = n
		}
	}
	want := map[string][]string{
		imagesDir + "/control-plane.tar": {"registry.k8s.io/etcd:3.7.0-0", "registry.k8s.io/kube-apiserver:v1.37.2", "registry.k8s.io/kube-controller-manager:v1.37.2",
			"registry.k8s.io/kube-scheduler:v1.37.2", "registry.k8s.io/kube-proxy:v1.37.2"},
		imagesDir + "/pause.tar":   {"registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10"},
		imagesDir + "/extra-0.tar": {"driver image"},
	}
	for p, n := range want {
		if !slices.Equal(images[p], n) {
			t.Errorf("%s: %v, want %v", p, images[p], n)
		}
	}
	if len(images) != len(want) {
		t.Errorf("the node imports %v", images)
	}
	cpHeaders, _, _, _ := layerFiles(t, func() string {
		a := filepath.Join(t.TempDir(), "cp.tar")
		os.WriteFile(a, contents[imagesDir+"/control-plane.tar"], 0o644)
		return a
	}())
	for _, c := range append(slices.Clone(controlPlane), "etcd") {
		if h := cpHeaders["/usr/local/bin/"+c]; h == nil || h.Linkname != "kube" {
			t.Errorf("the control plane's image has no %s on kube: %+v", c, h)
		}
	}

	again, err := Build(ctx, in, out)
	if err != nil || !again.Reused || again.Name != b.Name || again.Archive != b.Archive {
		t.Errorf("the same inputs again: %+v, %v; want the first build reused", again, err)
	}
	os.WriteFile(in.Kube, []byte("another kube"), 0o755)
	other, err := Build(ctx, in, out)
	if err != nil || other.Reused || other.Name == b.Name {
		t.Errorf("another kube: %+v, %v; want a new image", other, err)
	}
	if _, err := os.Stat(b.Archive); !os.IsNotExist(err) {
		t.Errorf("the image of the earlier inputs is kept: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(out, ".build-*")); len(leftovers) > 0 {
		t.Errorf("left behind: %v", leftovers)
	}
}

// An input that is missing names itself, and nothing is written.
func TestBuildMissingInput(t *testing.T) {
	in := fakeInputs(t)
	in.Crictl = filepath.Join(t.TempDir(), "crictl")
	out := t.TempDir()
	_, err := Build(context.Background(), in, out)
	if err == nil || !strings.Contains(err.Error(), "node image input crictl") {
		t.Errorf("err = %v, want one naming the crictl input", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) > 0 {
		t.Errorf("wrote %v", entries)
	}
}
