// Package ociimage builds container images without a registry or a Docker
// engine.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image is a single-layer container image built from host files, with no
// registry: written as an OCI image layout archive that `ctr images
// import` (and `docker load`, `kind load image-archive`) accept.
type Image struct {
	// Names are the image's references, e.g. "dralab.dev/busybox:1.35".
	Names []string
	// Files maps paths in the image to host files copied into it.
	Files map[string]string
	// Symlinks maps paths in the image to their targets.
	Symlinks   map[string]string
	Entrypoint []string
	Cmd        []string
	Env        []string
}

// epoch makes images reproducible: the same files give the same digest.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes the image as an OCI layout tar archive.
func (img *Image) WriteArchive(out string) error {
	layer, diffID, err := img.layer()
	if err != nil {
		return err
	}
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(layer), Size: int64(len(layer))}
	config := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   ocispec.ImageConfig{Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		Created:  &epoch,
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return err
	}
	configDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(configJSON), Size: int64(len(configJSON))}
	manifestJSON, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	// One index entry per name, all for the same manifest.
	index := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	for _, name := range img.Names {
		index.Manifests = append(index.Manifests, ocispec.Descriptor{
			MediaType:   ocispec.MediaTypeImageManifest,
			Digest:      digest.FromBytes(manifestJSON),
			Size:        int64(len(manifestJSON)),
			Annotations: map[string]string{"io.containerd.image.name": name, ocispec.AnnotationRefName: name},
			// Without a platform, some importers (ctr as `kind load` runs it
			// on some node images) filter the image out.
			Platform: &config.Platform,
		})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	layoutJSON, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layoutJSON},
		{"index.json", indexJSON},
		{blobPath(digest.FromBytes(manifestJSON)), manifestJSON},
		{blobPath(configDesc.Digest), configJSON},
		{blobPath(layerDesc.Digest), layer},
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

func blobPath(d digest.Digest) string { return path.Join("blobs", d.Algorithm().String(), d.Encoded()) }

// layer returns the gzipped layer and the digest of its uncompressed tar.
func (img *Image) layer() ([]byte, digest.Digest, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dirs := map[string]bool{}
	var names []string
	for p := range img.Files {
		names = append(names, p)
	}
	for p := range img.Symlinks {
		names = append(names, p)
	}
	sort.Strings(names)
	mkdirs := func(p string) error {
		var parents []string
		for d := path.Dir(p); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range names {
		if err := mkdirs(p); err != nil {
			return nil, "", err
		}
		if target, ok := img.Symlinks[p]; ok {
			if err := tw.WriteHeader(&tar.Header{Name: p[1:], Linkname: target, Mode: 0o777, ModTime: epoch, Typeflag: tar.TypeSymlink}); err != nil {
				return nil, "", err
			}
			continue
		}
		data, err := os.ReadFile(img.Files[p])
		if err != nil {
			return nil, "", fmt.Errorf("image %v: %w", img.Names, err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: p[1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	diffID := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum[:]))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.ModTime = epoch
	if _, err := io.Copy(zw, &raw); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), diffID, nil
}
