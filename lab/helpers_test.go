package lab_test

import (
	"context"
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/realnode"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// exampleConfig is an example configuration under a test's lab name.
func exampleConfig(t testing.TB, file, name string) *config.Config {
	t.Helper()
	cfg, err := config.Example(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = name
	return cfg
}

// upLab brings a lab up, deleted when the test ends, and returns it with a
// client of it.
func upLab(ctx context.Context, t testing.TB, root, bin string, cfg *config.Config) (*lab.Lab, *rest.Config, kubernetes.Interface) {
	t.Helper()
	l := newLab(t, root, bin, cfg)
	if _, err := l.Up(ctx); err != nil {
		t.Fatal(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return l, restConfig, kubernetes.NewForConfigOrDie(restConfig)
}

// runConformance runs both layers of the conformance suite for a driver
// manifest on a lab, as subtests.
func runConformance(ctx context.Context, t *testing.T, l *lab.Lab, client kubernetes.Interface, manifestFile string) {
	t.Helper()
	m, err := manifest.Load(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("conformance sanity", func(t *testing.T) {
		sc, err := scratchlab.SanityConfig(ctx, l, client, m)
		if err != nil {
			t.Fatal(err)
		}
		sanity.Test(t, sc)
	})
	t.Run("conformance cluster", func(t *testing.T) {
		co, err := scratchlab.ClusterOptions(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		testenv := env.NewWithConfig(envconf.New().WithKubeconfigFile(l.Kubeconfig()))
		testenv.Test(t, cluster.Features(m, co)...)
	})
}

// requireRealNodeHost fails a test of a real node on a host that cannot run
// one, saying what to do: CI runs as root with the packages installed.
func requireRealNodeHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the real node needs root; run the tests as root (CI does)")
	}
	if missing := realnode.MissingHostPrograms(); len(missing) > 0 {
		t.Fatalf("missing %v: run go run mage.go deps:realnode (CI does)", missing)
	}
}
