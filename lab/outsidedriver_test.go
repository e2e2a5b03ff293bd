package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/build"
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
	l, _, client := upLab(ctx, t, stateRoot(t), bin, cfg)
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if !n.Healthy || n.Profile != gpu.DriverName {
			t.Errorf("node %+v: want healthy, serving %s", n, gpu.DriverName)
		}
	}
	runConformance(ctx, t, l, client, "../drivers/fakegpu/driver.yaml")
}
