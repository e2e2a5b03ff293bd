package kind

import (
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/kubernetes/pkg/features" // registers Kubernetes' feature gates
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
	}
}
