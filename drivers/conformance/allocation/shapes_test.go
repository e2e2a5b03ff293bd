package allocation

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// A shape is a recorded cluster state the lab does not publish, written by
// hand after real drivers' and clouds' documented layouts
// (testdata/shapes/*.yaml: the objects, then one Expectation per pod). For
// each pod it names, by hand, the nodes where the allocator can place the
// pod's claims and the reason code a reader must be given: the oracle is
// the shape's author reading the API's rules, not this package.
type expectation struct {
	Kind string `json:"kind"`
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Fits are the nodes the allocator places the pod's claims on.
	Fits []string `json:"fits"`
	// Code is the reason code; Says, words the reason must hold (the
	// blocking object: a node, pool, device, claim, taint).
	Code string   `json:"code"`
	Says []string `json:"says"`
	// Why says what the state shows, for the reader of the file.
	Why string `json:"why"`
}

type shape struct {
	pods    []v1.Pod
	nodes   []v1.Node
	slices  []resourceapi.ResourceSlice
	classes []resourceapi.DeviceClass
	claims  []resourceapi.ResourceClaim
	rules   []resourceapi.DeviceTaintRule
	expect  []expectation
}

func (sh *shape) snapshot() *Snapshot {
	return NewSnapshot(Vocabulary{}, metav1.NamespaceAll, slices.Clone(sh.pods), slices.Clone(sh.claims), slices.Clone(sh.slices),
		slices.Clone(sh.classes), slices.Clone(sh.rules), slices.Clone(sh.nodes))
}

func readShape(t *testing.T, path string) *shape {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sh := &shape{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var e expectation
		if err := yaml.Unmarshal(doc, &e); err == nil && e.Kind == "Expectation" {
			if err := yaml.UnmarshalStrict(doc, &e); err != nil {
				t.Fatalf("%s: expectation %s: %v", path, e.Pod, err)
			}
			sh.expect = append(sh.expect, e)
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o := obj.(type) {
		case *v1.Pod:
			sh.pods = append(sh.pods, *o)
		case *v1.Node:
			sh.nodes = append(sh.nodes, *o)
		case *resourceapi.ResourceSlice:
			sh.slices = append(sh.slices, *o)
		case *resourceapi.DeviceClass:
			sh.classes = append(sh.classes, *o)
		case *resourceapi.ResourceClaim:
			sh.claims = append(sh.claims, *o)
		case *resourceapi.DeviceTaintRule:
			sh.rules = append(sh.rules, *o)
		default:
			t.Fatalf("%s: a shape holds no %T", path, obj)
		}
	}
	if len(sh.expect) == 0 {
		t.Fatalf("%s: no Expectation", path)
	}
	return sh
}

func TestShapes(t *testing.T) {
	paths, err := filepath.Glob("testdata/shapes/*.yaml")
	if err != nil || len(paths) < 10 {
		t.Fatalf("shapes: %v, %v", paths, err)
	}
	codes := map[string]int{}
	for _, path := range paths {
		sh := readShape(t, path)
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			for _, e := range sh.expect {
				s := sh.snapshot()
				ns, name, _ := strings.Cut(e.Pod, "/")
				i := slices.IndexFunc(s.Pods, func(p v1.Pod) bool { return p.Namespace == ns && p.Name == name })
				if i < 0 {
					t.Fatalf("no pod %s", e.Pod)
				}
				pod := &s.Pods[i]
				ctx := context.Background()
				v, err := s.Verdict(ctx, pod)
				if err != nil || v == nil {
					t.Fatalf("%s: verdict %v, %v", e.Pod, v, err)
				}
				if got := v.Fits(); !slices.Equal(got, e.Fits) {
					t.Errorf("%s: the allocator places its claims on %v, want %v (%s); per node: %+v", e.Pod, got, e.Fits, e.Why, v.Nodes)
				}
				code, msg, err := s.why(ctx, pod)
				if err != nil {
					t.Fatalf("%s: %v", e.Pod, err)
				}
				if code != e.Code {
					t.Errorf("%s: code %s (%q), want %s (%s)", e.Pod, code, msg, e.Code, e.Why)
				}
				for _, w := range e.Says {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: %q does not say %q", e.Pod, msg, w)
					}
				}
				codes[e.Code]++
			}
		})
	}
	// Every code the verdict and the model give has a shape where it is
	// the answer.
	for _, c := range []string{NodeTaint, NodeSelector, NodeUnschedulable, NodeNotReady, NotDRA, Insufficient, PoolIncomplete,
		NoMatchingDevice, AllAllocated, Tainted, NotOnOneNode, ConstraintUnmet, TooFew} {
		if codes[c] == 0 {
			t.Errorf("no shape expects %s", c)
		}
	}
}

// A rack's devices count as free on the rack's nodes only: the per-node
// counts of a pod's candidates leave out the nodes the slice's node
// selector does not pick.
func TestFreePerNodeCountsWhereDevicesReach(t *testing.T) {
	s := readShape(t, "testdata/shapes/02-rack-node-selector.yaml").snapshot()
	i := slices.IndexFunc(s.Pods, func(p v1.Pod) bool { return p.Name == "anywhere" })
	cands, err := s.Candidates(context.Background(), &s.Pods[i])
	if err != nil {
		t.Fatal(err)
	}
	free := FreePerNode(cands)
	if got := free["anywhere/accel/"]; len(got) != 2 || got["a1"] != 2 || got["a2"] != 2 {
		t.Errorf("free per node %v, want a1 2 and a2 2, b1 none", free)
	}
	if len(cands) != 2 || !slices.Equal(cands[0].Reaches, []string{"a1", "a2"}) {
		t.Errorf("candidates %+v, want two reaching a1 and a2", cands)
	}
}
