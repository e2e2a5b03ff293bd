package kind

import (
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/kubernetes/pkg/features" // registers Kubernetes' feature gates

	"github.com/dralab/dralab/lab/config"
)

// kind fails to create a cluster whose configuration names an unknown
// gate, or turns off a locked one: every gate the lab sets exists in
// Kubernetes 1.37 and is on by default.
func TestFeatureGatesExistAndAreOnByDefault(t *testing.T) {
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	for _, g := range FeatureGates {
		if _, ok := known[featuregate.Feature(g)]; !ok {
			t.Errorf("feature gate %s does not exist in Kubernetes 1.37", g)
			continue
		}
		if !utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(g)) {
			t.Errorf("feature gate %s is off by default in 1.37", g)
		}
		// RenderFor leaves the locked ones out, by the lab's word on them.
		if locked := known[featuregate.Feature(g)].LockToDefault; config.GateLocked(g) != locked {
			t.Errorf("feature gate %s: the lab says locked %v, Kubernetes %v", g, config.GateLocked(g), locked)
		}
	}
}

// A lab's own gates and API versions reach kind's cluster configuration,
// which gives them to every component of every node; the lab's wins over
// the gates the backend sets.
func TestLabGatesReachKind(t *testing.T) {
	cfg := config.Default()
	cfg.Backend = config.BackendKind
	cfg.FeatureGates = map[string]bool{"GenericWorkload": true, "DRADeviceTaints": false}
	cfg.RuntimeConfig = map[string]string{"scheduling.k8s.io/v1beta1": "true"}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	c, err := RenderFor(cfg, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.FeatureGates["GenericWorkload"] || c.FeatureGates["DRADeviceTaints"] || !c.FeatureGates["DRADeviceTaintRules"] {
		t.Errorf("kind's feature gates: %v", c.FeatureGates)
	}
	if c.RuntimeConfig["scheduling.k8s.io/v1beta1"] != "true" || c.RuntimeConfig["resource.k8s.io/v1"] != "true" {
		t.Errorf("kind's runtime config: %v", c.RuntimeConfig)
	}
}
