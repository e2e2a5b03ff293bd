package hollownode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// A container's log shows each device metadata file its CDI edits mount,
// the stream's first (newest) object on one line; other mounts are not
// printed, and a mounted file that is missing fails the container as a
// real runtime's bind mount would.
func TestMetadataFiles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "metadata.json")
	stream := "{\n  \"apiVersion\": \"metadata.resource.k8s.io/v1beta1\",\n  \"kind\": \"DeviceMetadata\"\n}\n\n{\"apiVersion\": \"metadata.resource.k8s.io/v1alpha1\"}\n"
	if err := os.WriteFile(src, []byte(stream), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/gpu.dralab.dev-metadata.json"
	lines, err := metadataFiles([]oci.Mount{{Destination: "/etc/hosts", Source: "/nonexistent"}, {Destination: dest, Source: src}})
	if err != nil {
		t.Fatal(err)
	}
	want := dest + `={"apiVersion":"metadata.resource.k8s.io/v1beta1","kind":"DeviceMetadata"}`
	if len(lines) != 1 || lines[0] != want {
		t.Errorf("lines = %q, want [%q]", lines, want)
	}
	if _, err := metadataFiles([]oci.Mount{{Destination: dest, Source: filepath.Join(dir, "gone.json")}}); err == nil || !strings.Contains(err.Error(), dest) {
		t.Errorf("a missing file: %v, want an error naming the path in the container", err)
	}
}
