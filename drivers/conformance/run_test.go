package conformance_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dralab/dralab/drivers/conformance"
)

// A kubeconfig alone does not let the suite touch a cluster: Run refuses
// it before building or running anything, naming the context, its server
// and the consent to give; Where says the same.
func TestRunRefusesAClusterWithoutConsent(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443"}
	cfg.Contexts["prod"] = &clientcmdapi.Context{Cluster: "c"}
	cfg.CurrentContext = "prod"
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
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
	o.Target = "prod"
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
