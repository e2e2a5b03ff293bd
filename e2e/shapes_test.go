package e2e

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
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/cluster"
)

// shapesDir holds the hand-written cluster states of the allocation
// package's oracle test.
const shapesDir = "../drivers/conformance/allocation/testdata/shapes"

// shapeLabel marks the nodes a shape adds, and pins its pods to them.
const shapeLabel = "e2e.dralab.dev/shape"

// TestShapesOnTheLab gives the real scheduler each shape the allocation
// package's oracle test reads (network-attached devices, pools of many
// slices and generations, tainted, cordoned and not Ready nodes, All
// requests, constraints, extended resources, taint rules): its nodes (Node
// objects no kubelet runs), classes, slices of drivers nobody runs (the
// scheduler allocates without a kubelet plugin), claims (those held with
// their allocation written), taint rules and pods, pinned to the shape's
// nodes. Each pod the shape's author says fits is bound by the scheduler
// to one of the nodes said; each other waits, and `kubectl dra`'s reading
// of the lab gives it the reason code the author wrote, naming what blocks
// it. Only on the lab the suite starts: it adds Node objects.
func TestShapesOnTheLab(t *testing.T) {
	requireCluster(t)
	if theLab == nil {
		t.Skip("runs on the default lab the suite starts (no KUBECONFIG): it adds Node objects, which a real cluster's autoscaler and controllers would act on")
	}
	_, client := labClients(t, theLab)
	paths, err := filepath.Glob(filepath.Join(shapesDir, "*.yaml"))
	if err != nil || len(paths) < 10 {
		t.Fatalf("shapes: %v, %v", paths, err)
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			runShape(t, client, path, name)
		})
	}
}

type shapeExpectation struct {
	Kind string   `json:"kind"`
	Pod  string   `json:"pod"`
	Fits []string `json:"fits"`
	Code string   `json:"code"`
	Says []string `json:"says"`
	Why  string   `json:"why"`
}

func runShape(t *testing.T, client kubernetes.Interface, path, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ns := "shape-" + strings.SplitN(name, "-", 2)[0]
	var (
		nodes    []*v1.Node
		pods     []*v1.Pod
		claims   []*resourceapi.ResourceClaim
		expected []shapeExpectation
		created  []func(context.Context) error
	)
	// Everything made is taken back, pods first and at once (no kubelet
	// confirms their end), whatever happens.
	defer func() {
		cleanup, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		for i := len(created) - 1; i >= 0; i-- {
			if err := created[i](cleanup); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleaning up: %v", err)
			}
		}
	}()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			objs = append(objs, doc)
		}
	}
	if err := cluster.CreateNamespace(ctx, client, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	created = append(created, func(ctx context.Context) error {
		return client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	for _, doc := range objs {
		var e shapeExpectation
		if err := yaml.Unmarshal(doc, &e); err == nil && e.Kind == "Expectation" {
			e.Pod = ns + "/" + strings.TrimPrefix(e.Pod, "default/")
			expected = append(expected, e)
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *v1.Node:
			nodes = append(nodes, o)
		case *v1.Pod:
			pods = append(pods, o)
		case *resourceapi.ResourceClaim:
			claims = append(claims, o)
		case *resourceapi.DeviceClass:
			if _, err := client.ResourceV1().DeviceClasses().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created = append(created, func(ctx context.Context) error {
				return client.ResourceV1().DeviceClasses().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case *resourceapi.ResourceSlice:
			if _, err := client.ResourceV1().ResourceSlices().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created = append(created, func(ctx context.Context) error {
				return client.ResourceV1().ResourceSlices().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case *resourceapi.DeviceTaintRule:
			if _, err := client.ResourceV1().DeviceTaintRules().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created = append(created, func(ctx context.Context) error {
				return client.ResourceV1().DeviceTaintRules().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		default:
			t.Fatalf("a shape holds no %T", obj)
		}
	}
	var shapeNodes []string
	for _, n := range nodes {
		status := n.Status
		n.Labels[shapeLabel] = ns
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created = append(created, func(ctx context.Context) error {
			return client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
		})
		// As a kubelet would report it: its conditions and resources
		// (the node controllers change the new node meanwhile).
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Status = *status.DeepCopy()
			if got.Status.Allocatable == nil {
				got.Status.Allocatable = v1.ResourceList{}
			}
			for r, q := range map[v1.ResourceName]string{v1.ResourceCPU: "8", v1.ResourceMemory: "32Gi", v1.ResourcePods: "110"} {
				if _, ok := got.Status.Allocatable[r]; !ok {
					got.Status.Allocatable[r] = resource.MustParse(q)
				}
			}
			got.Status.Capacity = got.Status.Allocatable
			for i := range got.Status.Conditions {
				got.Status.Conditions[i].LastHeartbeatTime = metav1.Now()
			}
			_, err = client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// A new node is tainted not-ready until the controller reads its
		// status: a Ready node of the shape has only its own taints
		// before any pod comes.
		if ready := slices.ContainsFunc(status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady && c.Status == v1.ConditionTrue }); ready {
			want := len(n.Spec.Taints)
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				got, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
				return err == nil && len(got.Spec.Taints) == want, nil
			}); err != nil {
				t.Fatalf("node %s keeps taints beyond its own: %v", n.Name, err)
			}
		}
		shapeNodes = append(shapeNodes, n.Name)
	}
	// The claims no pod uses are the shape's state (held ones with their
	// allocation); each pod meets that state alone, with its own claims,
	// as the shape's expectations read it.
	podClaims := map[string]bool{}
	for _, p := range pods {
		for _, pc := range p.Spec.ResourceClaims {
			podClaims[ptr.Deref(pc.ResourceClaimName, "")] = true
		}
	}
	createClaim := func(c *resourceapi.ResourceClaim) {
		t.Helper()
		c = c.DeepCopy()
		status := c.Status
		c.Namespace = ns
		got, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if status.Allocation != nil {
			got.Status = status
			if _, err := client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("claim %s's allocation: %v", c.Name, err)
			}
		}
	}
	for _, c := range claims {
		if !podClaims[c.Name] {
			createClaim(c)
		}
	}
	// The namespace must be gone before the next shape: its claims'
	// allocations would hold that shape's devices of the same names.
	t.Cleanup(func() {
		ctx, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("namespace %s is not gone: %v", ns, err)
		}
	})
	for _, e := range expected {
		_, name, _ := strings.Cut(e.Pod, "/")
		i := slices.IndexFunc(pods, func(p *v1.Pod) bool { return p.Name == name })
		if i < 0 {
			t.Errorf("no pod %s", e.Pod)
			continue
		}
		checkShapePod(ctx, t, client, ns, shapeNodes, claims, pods[i], e, createClaim)
	}
}

// checkShapePod gives the scheduler one pod of a shape, with its claims,
// and checks its decision and `kubectl dra`'s reading against the shape's
// expectation; the pod and its claims are gone when it returns.
func checkShapePod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, shapeNodes []string, claims []*resourceapi.ResourceClaim,
	p *v1.Pod, e shapeExpectation, createClaim func(*resourceapi.ResourceClaim)) {
	t.Helper()
	var mine []string
	for _, pc := range p.Spec.ResourceClaims {
		name := ptr.Deref(pc.ResourceClaimName, "")
		if i := slices.IndexFunc(claims, func(c *resourceapi.ResourceClaim) bool { return c.Name == name }); i >= 0 {
			createClaim(claims[i])
			mine = append(mine, name)
		}
	}
	p = p.DeepCopy()
	p.Namespace = ns
	p.Status = v1.PodStatus{}
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[shapeLabel] = ns
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// At once: no kubelet confirms the end of a pod on a shape's node.
		if err := client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Errorf("deleting %s: %v", p.Name, err)
		}
		for _, c := range mine {
			if err := client.ResourceV1().ResourceClaims(ns).Delete(ctx, c, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting claim %s: %v", c, err)
			}
		}
		// Gone, so that the next pod meets the shape's state.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			return !slices.ContainsFunc(l.Items, func(c resourceapi.ResourceClaim) bool { return slices.Contains(mine, c.Name) }), nil
		}); err != nil {
			t.Errorf("the claims of %s are not gone: %v", p.Name, err)
		}
	}()

	// The scheduler's turn: the pod bound, or refused.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && (got.Spec.NodeName != "" || slices.ContainsFunc(got.Status.Conditions, func(c v1.PodCondition) bool {
			return c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse
		})), nil
	}); err != nil {
		t.Fatalf("the scheduler did not try %s: %v", e.Pod, err)
	}
	s, err := allocation.Read(ctx, client, ns, allocation.Vocabulary{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Pods, func(q v1.Pod) bool { return q.Name == p.Name })
	if i < 0 {
		t.Fatalf("no pod %s", e.Pod)
	}
	pod := &s.Pods[i]
	if pod.Spec.NodeName != "" {
		if !slices.Contains(e.Fits, pod.Spec.NodeName) || (e.Code != allocation.NotDRA && e.Code != allocation.Insufficient) {
			t.Errorf("the scheduler bound %s to %s; the shape says it fits on %v, with reason %s (%s)", e.Pod, pod.Spec.NodeName, e.Fits, e.Code, e.Why)
		}
		t.Logf("%s bound to %s", e.Pod, pod.Spec.NodeName)
		return
	}
	v, err := s.Verdict(ctx, pod)
	if err != nil || v == nil {
		t.Fatalf("%s: verdict %v, %v", e.Pod, v, err)
	}
	var fits []string
	for _, n := range v.Fits() {
		if slices.Contains(shapeNodes, n) {
			fits = append(fits, n)
		}
	}
	if e.Code == allocation.NotDRA {
		t.Errorf("%s waits, but the shape says it fits on %v (%s); the allocator places it on %v", e.Pod, e.Fits, e.Why, fits)
		return
	}
	if !slices.Equal(fits, e.Fits) {
		t.Errorf("%s: the allocator places its claims on %v of the shape's nodes, want %v (%s)", e.Pod, fits, e.Fits, e.Why)
	}
	rows, err := s.PodRows(ctx, pod)
	if err != nil || len(rows) == 0 {
		t.Fatalf("%s: %v", e.Pod, err)
	}
	code, msg := rows[0].ReasonCode, rows[0].Reason
	if code != e.Code {
		t.Errorf("%s: kubectl dra says %s (%s), the shape %s (%s)", e.Pod, code, msg, e.Code, e.Why)
	}
	for _, w := range e.Says {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not say %q", e.Pod, msg, w)
		}
	}
	t.Logf("%s waits: %s: %s", e.Pod, code, msg)
}
