package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// readArchive reads an OCI layout archive into its entries by name.
func readArchive(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[h.Name]; dup {
			t.Errorf("the archive holds %s twice", h.Name)
		}
		out[h.Name] = data
	}
}

func blobOf(t *testing.T, entries map[string][]byte, d ocispec.Descriptor) []byte {
	t.Helper()
	data, ok := entries[blobPath(d.Digest)]
	if !ok {
		t.Fatalf("no blob %s", d.Digest)
	}
	if sum := sha256.Sum256(data); "sha256:"+hex.EncodeToString(sum[:]) != d.Digest.String() || int64(len(data)) != d.Size {
		t.Fatalf("blob %s: its bytes are not its digest and size", d.Digest)
	}
	return data
}

// An image of a base root filesystem and files of its own is two layers,
// the base's tar as it was, the files (with their host permissions and
// links) above it; the config's diff IDs are the layers' uncompressed
// digests, every name points at the one manifest, and the same inputs
// write the same archive.
func TestImageOverABase(t *testing.T) {
	dir := t.TempDir()
	var base bytes.Buffer
	tw := tar.NewWriter(&base)
	for _, h := range []*tar.Header{{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6}} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("debian"))
		}
	}
	tw.Close()
	baseFile := filepath.Join(dir, "rootfs.tar")
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rootfs.tar", base.Bytes(), 0o644)
	img := &Image{
		Names:      []string{"registry.k8s.io/kube-apiserver:v1.37.2", "registry.k8s.io/kube-proxy:v1.37.2"},
		Base:       []string{baseFile},
		Files:      map[string]string{"/usr/local/bin/kube": write("kube", []byte("#!binary"), 0o755), "/etc/kube.conf": write("conf", []byte("x=1"), 0o644)},
		Symlinks:   map[string]string{"/usr/local/bin/kube-proxy": "kube"},
		Modes:      map[string]os.FileMode{"/etc/kube.conf": 0o640},
		Entrypoint: []string{"/usr/local/bin/kube"},
	}
	out := filepath.Join(dir, "image.tar")
	if err := img.WriteArchive(out); err != nil {
		t.Fatal(err)
	}
	entries := readArchive(t, out)
	var index ocispec.Index
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 2 || index.Manifests[0].Digest != index.Manifests[1].Digest ||
		index.Manifests[1].Annotations[ocispec.AnnotationRefName] != "registry.k8s.io/kube-proxy:v1.37.2" {
		t.Fatalf("index %+v: want both names on one manifest", index.Manifests)
	}
	var manifest ocispec.Manifest
	if err := json.Unmarshal(blobOf(t, entries, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	var config ocispec.Image
	if err := json.Unmarshal(blobOf(t, entries, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Layers) != 2 || len(config.RootFS.DiffIDs) != 2 || !slices.Equal(config.Config.Entrypoint, img.Entrypoint) {
		t.Fatalf("manifest %+v, config %+v: want two layers and the entrypoint", manifest, config)
	}
	var layers []map[string]*tar.Header
	for i, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blobOf(t, entries, l)))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != config.RootFS.DiffIDs[i].String() {
			t.Errorf("layer %d: its diff ID is not its uncompressed digest", i)
		}
		if i == 0 && !bytes.Equal(raw, base.Bytes()) {
			t.Error("the base layer is not the base tar as it was")
		}
		headers := map[string]*tar.Header{}
		tr := tar.NewReader(bytes.NewReader(raw))
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			headers[h.Name] = h
		}
		layers = append(layers, headers)
	}
	own := layers[1]
	if h := own["usr/local/bin/kube"]; h == nil || h.Mode != 0o755 {
		t.Errorf("the binary: %+v, want mode 0755", h)
	}
	if h := own["etc/kube.conf"]; h == nil || h.Mode != 0o640 {
		t.Errorf("the configuration file: %+v, want the mode Modes gives, 0640", h)
	}
	if h := own["usr/local/bin/kube-proxy"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "kube" {
		t.Errorf("the link: %+v", h)
	}
	if h := own["usr/local/bin/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("the files' directory is not in the layer: %+v", h)
	}
	again := filepath.Join(dir, "again.tar")
	if err := img.WriteArchive(again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("the same inputs wrote two different archives")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".ociimage-*")); len(leftovers) > 0 {
		t.Errorf("layer files left behind: %v", leftovers)
	}
	if err := (&Image{Names: []string{"x"}, Base: []string{filepath.Join(dir, "missing.tar")}}).WriteArchive(filepath.Join(dir, "bad.tar")); err == nil {
		t.Error("a missing base layer wrote an image")
	}
}
