package lab

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// lab/config spells the GPU driver's values itself, since it depends on no
// driver: they must be the driver's.
func TestConfigSpellsTheDriversValues(t *testing.T) {
	for _, c := range []struct{ config, driver string }{
		{config.PartitioningMIG, fakegpu.PartitioningMIG},
		{config.SharingMemory, fakegpu.SharingMemory},
		{config.AttachFabric, fakegpu.AttachFabric},
		{config.NVMLMockPrefix, nvml.MockPrefix},
		{config.NVMLHost, nvml.SourceHost},
		{config.LabelRack, gpu.NodeRackLabel},
		{config.LabelNVLinkDomain, gpu.NodeNVLinkDomainLabel},
	} {
		if c.config != c.driver {
			t.Errorf("lab/config says %q where the driver says %q", c.config, c.driver)
		}
	}
	if c := nodedrivers.Catalog; len(c.Profiles()) == 0 || len(c.MIGProfiles()) == 0 || len(c.NVMLMocks()) == 0 || len(c.NICProfiles()) == 0 {
		t.Error("the drivers' catalog is empty")
	}
}

// New checks a configuration's GPU names against the driver's before it
// creates anything: one error naming the file and the field.
func TestNewChecksGPUNames(t *testing.T) {
	file := filepath.Join(t.TempDir(), "my-lab.yaml")
	data := "apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, gpus: {profile: h200-141gb, count: 1}}]\n"
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	_, err := New(WithConfigFile(file), WithStateRoot(root))
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("New = %v, want ErrInvalid", err)
	}
	for _, want := range []string{file, "nodes[0].gpus.profile", `"h200-141gb"`, "h100-80gb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) > 0 {
		t.Errorf("New left %d entries in the state root", len(entries))
	}
}

func TestPlatformHint(t *testing.T) {
	if h := platformHint("linux", config.BackendEmbedded); h != "" {
		t.Errorf("platformHint(linux, embedded) = %q; want none", h)
	}
	if h := platformHint("darwin", config.BackendKind); h != "" {
		t.Errorf("platformHint(darwin, kind) = %q; want none", h)
	}
	if h := platformHint("darwin", config.BackendEmbedded); !strings.Contains(h, "DRALAB_BACKEND=kind") || !strings.Contains(h, "darwin") {
		t.Errorf("platformHint(darwin, embedded) = %q; want it to name the system and point to DRALAB_BACKEND=kind", h)
	}
}

// $DRALAB_KIND_NODE_IMAGE names a kind lab's node image, as nodeImage does;
// an embedded lab ignores it.
func TestKindNodeImageFromTheEnvironment(t *testing.T) {
	t.Setenv(EnvKindNodeImage, "dralab.dev/kind-node:test")
	kind := config.Default()
	kind.Backend = config.BackendKind
	l, err := New(WithConfig(kind), WithStateRoot(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Config().NodeImage; got != "dralab.dev/kind-node:test" {
		t.Errorf("node image %q, want $%s's", got, EnvKindNodeImage)
	}
	l, err = New(WithConfig(config.Default()), WithStateRoot(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Config().NodeImage; got != "" {
		t.Errorf("an embedded lab's node image %q, want none", got)
	}
}
