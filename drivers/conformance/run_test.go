package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dralab/dralab/drivers/conformance"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
)

// A kubeconfig alone does not let the suite touch a cluster: Run refuses
// it before building or running anything, naming the context, its server
// and the consent to give; Where says the same.
func TestRunRefusesAClusterWithoutConsent(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "prod")
	o := conformance.Options{Manifest: "../fakegpu/driver.yaml", Kubeconfig: kubeconfig}
	report, err := conformance.Run(context.Background(), o)
	if !errors.Is(err, conformance.ErrNoConsent) || report != nil {
		t.Fatalf("Run = %v, %v; want ErrNoConsent", report, err)
	}
	for _, want := range []string{`"prod"`, "https://10.0.0.1:6443", "DRALAB_TARGET=prod"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %s", err, want)
		}
	}
	o.Target = "prod@https://10.0.0.1:6443"
	where, err := conformance.Where(o)
	if err != nil || !strings.Contains(where, `"prod" at https://10.0.0.1:6443`) {
		t.Errorf("with consent, Where = %q, %v", where, err)
	}
	o.Kubeconfig = ""
	if where, err := conformance.Where(o); err == nil {
		t.Errorf("consent without a kubeconfig: Where = %q, want an error", where)
	}
	o.Target = ""
	if where, err := conformance.Where(o); err != nil || !strings.Contains(where, "fresh embedded lab") {
		t.Errorf("no kubeconfig: Where = %q, %v", where, err)
	}
}

// The sanity layer needs a node's plugin sockets: without a way to reach
// them it is one failed case that says why (a skip with a warning when
// unverified checks are allowed), and a Sanity that cannot set it up fails
// it; either way the JUnit file says so. No cluster is called.
func TestRunSanityLayerWithoutANode(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "ci")
	junit := filepath.Join(t.TempDir(), "junit.xml")
	o := conformance.Options{Manifest: "../fakegpu/driver.yaml", Kubeconfig: kubeconfig, Target: "ci@https://10.0.0.1:6443", Layer: conformance.LayerSanity, JUnit: junit}
	var seen []results.Case
	o.OnCase = func(c results.Case) { seen = append(seen, c) }
	report, err := conformance.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Cases) != 1 || report.Cases[0].Name != "sanity" || report.Cases[0].Status != results.Failed ||
		!strings.Contains(report.Cases[0].Message, "not verified: the sanity layer did not run: the sanity layer talks to a node's kubelet plugin sockets") ||
		len(seen) != 1 || !report.Failed() {
		t.Fatalf("cases %+v (seen %d), want the sanity layer failed as not verified, saying why", report.Cases, len(seen))
	}
	data, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(data), `<failure message="not verified: the sanity layer did not run`) {
		t.Errorf("JUnit %s = %s, %v", junit, data, err)
	}

	o.AllowUnverified = true
	if report, err = conformance.Run(context.Background(), o); err != nil || report.Failed() || report.Cases[0].Status != results.Skipped ||
		report.Unverified() != 1 || !strings.Contains(report.Summary(), "WARNING: 1 checks") {
		t.Errorf("allowed unverified: %+v, %v; want the layer skipped with a warning", report, err)
	}
	if data, err := os.ReadFile(junit); err != nil || !strings.Contains(string(data), `<skipped message="not verified: the sanity layer did not run`) {
		t.Errorf("JUnit %s = %s, %v", junit, data, err)
	}
	o.AllowUnverified = false

	o.Sanity = func(context.Context, *target.Target, kubernetes.Interface, *manifest.Manifest) (sanity.Config, error) {
		return sanity.Config{}, fmt.Errorf("%w: none on this machine", conformance.ErrNoNode)
	}
	if report, err = conformance.Run(context.Background(), o); err != nil || report.Cases[0].Status != results.Failed || !strings.Contains(report.Cases[0].Message, "none on this machine") {
		t.Errorf("a Sanity without a node: %+v, %v; want the layer failed with its reason", report, err)
	}
	o.Sanity = func(context.Context, *target.Target, kubernetes.Interface, *manifest.Manifest) (sanity.Config, error) {
		return sanity.Config{}, errors.New("no node has the driver's devices")
	}
	if report, err = conformance.Run(context.Background(), o); err != nil || !report.Failed() || report.Cases[0].Message != "setup: no node has the driver's devices" {
		t.Errorf("a Sanity that fails: %+v, %v; want the layer failed with its error", report, err)
	}

	o.Layer = "both"
	if _, err := conformance.Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), `layer "both"`) {
		t.Errorf("an unknown layer: %v", err)
	}
	o.Layer, o.Kubeconfig, o.Target = conformance.LayerSanity, "", ""
	if _, err := conformance.Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "give a kubeconfig") {
		t.Errorf("no kubeconfig: %v", err)
	}
}

// writeKubeconfig writes a kubeconfig whose current context, name, points
// at an address no test calls.
func writeKubeconfig(t *testing.T, name string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443"}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "c"}
	cfg.CurrentContext = name
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}
