package conformance

import (
	"context"
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/testlab"
)

// TestSanity is layer 1 on one node of an embedded lab: the node's plugin
// sockets and CDI directory are host paths there, and the lab restarts a
// killed driver. The node is the one whose slices hold most devices.
func TestSanity(t *testing.T) {
	if testing.Short() {
		t.Skip(shortRun)
	}
	ctx := context.Background()
	kubeconfig := testenv.EnvConf().KubeconfigFile()
	where, err := target.Resolve(target.Request{Kubeconfig: kubeconfig, Context: testenv.EnvConf().KubeContext(), Consent: os.Getenv(target.EnvConsent), Lab: labstate.LabOf})
	if err != nil {
		t.Fatal(err)
	}
	if where == nil || where.LabDir == "" {
		t.Skipf("the sanity layer talks to a node's plugin sockets, and %s is not an embedded lab's kubeconfig: "+
			"run it on the embedded lab, or call drivers/conformance/sanity from the driver's own tests", kubeconfig)
	}
	dir := labstate.Dir(where.LabDir)
	client, err := kubernetes.NewForConfig(testenv.EnvConf().Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := testlab.SanityConfig(ctx, dir, client, driver)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sanity checks of %s on node %s", driver.Driver, cfg.NodeName)
	sanity.Test(t, cfg)
}
