// Package ociimage builds container images without a registry or a Docker
// engine.
package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image is a container image built from host files, with no registry:
// written as an OCI image layout archive that `ctr images import` (and
// `docker load`, `podman load`, `kind load image-archive`) accept.
type Image struct {
	// Names are the image's references, e.g. "dralab.dev/busybox:1.35".
	Names []string
	// Base are tar archives (uncompressed, such as a root filesystem)
	// that are the image's lower layers, the first lowest; the image's
	// own files are the layer above them.
	Base []string
	// Files maps paths in the image to host files copied into it, with
	// their host permissions unless Modes gives the path's.
	Files map[string]string
	Modes map[string]os.FileMode
	// Symlinks maps paths in the image to their targets.
	Symlinks   map[string]string
	Entrypoint []string
	Cmd        []string
	Env        []string
	// StopSignal is the signal that stops the image's process (systemd's
	// SIGRTMIN+3 for a kind node); empty: the engine's default.
	StopSignal string
}

// CheckStatic says what is wrong with a pause image's program, which runs
// with no library beside it: not ELF, or linked against an interpreter
// (Debian's busybox is; its busybox-static is not).
func CheckStatic(file string) error {
	e, err := elf.Open(file)
	if err != nil {
		return err
	}
	defer e.Close()
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the pause image needs a static busybox (Debian's busybox-static)", file)
		}
	}
	return nil
}

// Pause is a pod sandbox image of the static busybox at host path busybox,
// under names: its sh sleeps until told to stop, and reaps the pod's
// zombies as PID 1 would.
func Pause(busybox string, names ...string) *Image {
	return &Image{
		Names:      names,
		Files:      map[string]string{"/bin/busybox": busybox},
		Symlinks:   map[string]string{"/bin/sh": "busybox", "/bin/sleep": "busybox"},
		Entrypoint: []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done"},
	}
}

// epoch makes images reproducible: the same files give the same digest.
var epoch = time.Unix(0, 0).UTC()

// blob is a layer written to a file: gzipped, with its digest and size,
// and the digest of its uncompressed tar (its diff ID).
type blob struct {
	file   string
	desc   ocispec.Descriptor
	diffID digest.Digest
}

// WriteArchive writes the image as an OCI layout tar archive. Layers are
// streamed through files beside out, never held in memory: a root
// filesystem and a Kubernetes binary make a layer of hundreds of MB.
func (img *Image) WriteArchive(out string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var layers []blob
	for _, base := range img.Base {
		l, err := gzipLayer(tmp, func(w io.Writer) error {
			f, err := os.Open(base)
			if err != nil {
				return fmt.Errorf("image %v: base layer: %w", img.Names, err)
			}
			defer f.Close()
			_, err = io.Copy(w, f)
			return err
		})
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	own, err := gzipLayer(tmp, img.writeLayer)
	if err != nil {
		return err
	}
	layers = append(layers, own)

	config := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   ocispec.ImageConfig{Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, StopSignal: img.StopSignal},
		RootFS:   ocispec.RootFS{Type: "layers"},
		Created:  &epoch,
	}
	var layerDescs []ocispec.Descriptor
	for _, l := range layers {
		config.RootFS.DiffIDs = append(config.RootFS.DiffIDs, l.diffID)
		layerDescs = append(layerDescs, l.desc)
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
		Layers:    layerDescs,
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

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	entry := func(name string, size int64, write func(io.Writer) error) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		return write(tw)
	}
	data := func(b []byte) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(b); return err }
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layoutJSON},
		{"index.json", indexJSON},
		{blobPath(digest.FromBytes(manifestJSON)), manifestJSON},
		{blobPath(configDesc.Digest), configJSON},
	} {
		if err := entry(e.name, int64(len(e.data)), data(e.data)); err != nil {
			return err
		}
	}
	written := map[digest.Digest]bool{}
	for _, l := range layers {
		if written[l.desc.Digest] {
			continue // two equal layers are one blob
		}
		written[l.desc.Digest] = true
		err := entry(blobPath(l.desc.Digest), l.desc.Size, func(w io.Writer) error {
			lf, err := os.Open(l.file)
			if err != nil {
				return err
			}
			defer lf.Close()
			_, err = io.Copy(w, lf)
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func blobPath(d digest.Digest) string { return path.Join("blobs", d.Algorithm().String(), d.Encoded()) }

// counter counts the bytes written through it.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// gzipLayer writes the tar that write produces into a file in dir,
// gzipped, and returns it with its digests.
func gzipLayer(dir string, write func(io.Writer) error) (blob, error) {
	f, err := os.CreateTemp(dir, "layer-")
	if err != nil {
		return blob{}, err
	}
	defer f.Close()
	compressed, raw := sha256.New(), sha256.New()
	var size counter
	zw, err := gzip.NewWriterLevel(io.MultiWriter(f, compressed, &size), gzip.BestSpeed)
	if err != nil {
		return blob{}, err
	}
	zw.ModTime = epoch
	if err := write(io.MultiWriter(zw, raw)); err != nil {
		return blob{}, err
	}
	if err := zw.Close(); err != nil {
		return blob{}, err
	}
	if err := f.Close(); err != nil {
		return blob{}, err
	}
	return blob{
		file:   f.Name(),
		desc:   ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: sum(compressed), Size: size.n},
		diffID: sum(raw),
	}, nil
}

func sum(h hash.Hash) digest.Digest {
	return digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil)))
}

// writeLayer writes the image's own files and links as a tar to w, each
// directory above them once, in path order.
func (img *Image) writeLayer(w io.Writer) error {
	tw := tar.NewWriter(w)
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
			return err
		}
		if target, ok := img.Symlinks[p]; ok {
			if err := tw.WriteHeader(&tar.Header{Name: p[1:], Linkname: target, Mode: 0o777, ModTime: epoch, Typeflag: tar.TypeSymlink}); err != nil {
				return err
			}
			continue
		}
		if err := copyFile(tw, p, img.Files[p], img.Modes[p]); err != nil {
			return fmt.Errorf("image %v: %w", img.Names, err)
		}
	}
	return tw.Close()
}

// copyFile writes host file src into tw at p, with mode or, when mode is
// 0, its own permissions.
func copyFile(tw *tar.Writer, p, src string, mode os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if mode == 0 {
		mode = st.Mode().Perm()
	}
	if err := tw.WriteHeader(&tar.Header{Name: p[1:], Mode: int64(mode), Size: st.Size(), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
