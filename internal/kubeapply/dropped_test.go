package kubeapply

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A field the API server left out of what it returned is dropped (a
// feature gate is off); fields sent empty, metadata and status are not
// looked for, and nothing is dropped from an object returned whole.
func TestDropped(t *testing.T) {
	objs, err := Decode("claim-template.yaml", []byte(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: pair, labels: {a: b}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.dralab.dev
          adminAccess: false
          selectors: []
          derivedAttributes:
          - {name: derived/numa, expression: 'device.attributes["gpu.dralab.dev"].numa'}
      constraints:
      - {requests: [gpu], matchAttribute: derived/numa}
`))
	if err != nil {
		t.Fatal(err)
	}
	sent := objs[0]
	if got := Dropped(sent, sent.DeepCopy()); len(got) != 0 {
		t.Errorf("an object returned whole: dropped %v", got)
	}
	got := sent.DeepCopy()
	unstructured.RemoveNestedField(got.Object, "metadata", "labels")
	requests, _, _ := unstructured.NestedSlice(got.Object, "spec", "spec", "devices", "requests")
	exactly := requests[0].(map[string]any)["exactly"].(map[string]any)
	delete(exactly, "derivedAttributes")
	delete(exactly, "adminAccess")
	delete(exactly, "selectors")
	if err := unstructured.SetNestedSlice(got.Object, requests, "spec", "spec", "devices", "requests"); err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.spec.devices.requests[0].exactly.derivedAttributes"}
	if d := Dropped(sent, got); !slices.Equal(d, want) {
		t.Errorf("dropped %v; want %v", d, want)
	}
	e := &DroppedError{Kind: "ResourceClaimTemplate", Name: "pair", Paths: want}
	if !strings.Contains(e.Error(), "dropped spec.spec.devices.requests[0].exactly.derivedAttributes of ResourceClaimTemplate pair: the feature gate") {
		t.Errorf("error %q", e)
	}
}
