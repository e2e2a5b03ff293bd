package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/testlab"
	"github.com/dralab/dralab/lab/config"
)

// TestOutsideDriverLab is a driver author's CI without Docker: a lab
// configuration runs an outside kubelet plugin binary on every node (here
// dralab-driver, given only a command line with placeholders and its
// DeviceClasses as a manifest file, as any other driver would be), and the
// conformance suite's two layers pass against it.
func TestOutsideDriverLab(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	dir := t.TempDir()
	var classes []byte
	for _, c := range gpu.DeviceClasses() {
		data, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		classes = append(append(classes, "---\n"...), data...)
	}
	if err := os.WriteFile(filepath.Join(dir, "classes.yaml"), classes, 0o600); err != nil {
		t.Fatal(err)
	}
	labYAML := `apiVersion: lab.dralab.dev/v1alpha1
kind: Lab
name: t-byo
nodes: [{name: node-a}, {name: node-b}]
driver:
  name: gpu.dralab.dev
  # Quoted: a word starting with { would open a YAML mapping.
  command:
  - "` + filepath.Join(filepath.Dir(bin), build.DriverBinary) + `"
  - "--node-name={nodeName}"
  - "--kubeconfig={kubeconfig}"
  - "--kubelet-registrar-dir={registrarDir}"
  - "--kubelet-plugins-dir={pluginsDir}"
  - "--cdi-dir={cdiDir}"
  - "--checkpoint-dir={stateDir}"
  - "--profile=h100-80gb"
  - "--gpus=4"
  manifests: [classes.yaml]
`
	file := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(file, []byte(labYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	l := newLab(t, stateRoot(t), bin, cfg)
	if _, err := l.Up(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Load("../drivers/fakegpu/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Only H100s: the prioritized list's first class always wins.
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if !n.Healthy || n.Profile != gpu.DriverName {
			t.Errorf("node %+v: want healthy, serving %s", n, gpu.DriverName)
		}
	}
	t.Run("conformance sanity", func(t *testing.T) {
		sc, err := testlab.SanityConfig(ctx, labstate.Dir(st.StateDir), client, m)
		if err != nil {
			t.Fatal(err)
		}
		sanity.Test(t, sc)
	})
	t.Run("conformance cluster", func(t *testing.T) {
		testenv := env.NewWithConfig(envconf.New().WithKubeconfigFile(l.Kubeconfig()))
		testenv.Test(t, cluster.Features(m, cluster.Options{})...)
	})
}
