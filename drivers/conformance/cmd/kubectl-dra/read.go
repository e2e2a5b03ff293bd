package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/nearest"
)

// reader reads one cluster for one command.
type reader struct {
	client kubernetes.Interface
	// namespace is "" for every namespace.
	namespace      string
	output         string
	stdout, stderr io.Writer
	// gates switch the allocator's features over what the cluster says.
	gates map[string]bool
}

// ErrNoDRA means the cluster serves no resource.k8s.io/v1.
var ErrNoDRA = errors.New("the cluster serves no resource.k8s.io/v1")

// snapshot reads the cluster, after checking it serves DRA's API; the
// resources it does not serve are said in one line each.
func (r *reader) snapshot(ctx context.Context) (*allocation.Snapshot, error) {
	if _, err := r.client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Dynamic Resource Allocation's API (GA in Kubernetes 1.34) is not served there, so no claim or device can be read", ErrNoDRA)
	} else if err != nil {
		return nil, fmt.Errorf("discovering resource.k8s.io/v1: %w", err)
	}
	s, err := allocation.Read(ctx, r.client, r.namespace, allocation.Vocabulary{})
	if err != nil {
		return nil, err
	}
	if len(r.gates) > 0 {
		f, err := allocation.WithGates(*s.Features, r.gates)
		if err != nil {
			return nil, fmt.Errorf("--feature-gates: %w", err)
		}
		s.Features, s.FeaturesFrom = &f, s.FeaturesFrom+", then --feature-gates"
	} else if !strings.HasPrefix(s.FeaturesFrom, "the API server") {
		fmt.Fprintf(r.stderr, "note: the allocator's features are %s; --feature-gates says otherwise\n", s.FeaturesFrom)
	}
	for _, res := range s.NotServed {
		fmt.Fprintf(r.stderr, "note: the cluster does not serve %s: read as none\n", res)
	}
	return s, nil
}

// where says which namespaces were searched.
func (r *reader) where() string {
	if r.namespace == "" {
		return "in any namespace"
	}
	return fmt.Sprintf("in namespace %q", r.namespace)
}

// Explanation is what `why` says of a pod, a claim or a gang.
type Explanation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the pods explained: the one asked about, a claim's, a
	// gang's members.
	Pods []PodExplanation `json:"pods,omitempty"`
	// Claim is the claim asked about, where it was.
	Claim *allocation.ClaimRow `json:"claim,omitempty"`
	// Message says what there is to say beyond the pods (a claim no pod
	// uses).
	Message string `json:"message,omitempty"`
}

// PodExplanation is a pod's allocation or why it waits.
type PodExplanation struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Node      string `json:"node,omitempty"`
	// Allocated are its devices: request, chosen subrequest, device.
	Allocated []PodDevice `json:"allocated,omitempty"`
	// ReasonCode and Reason say why it waits, in the allocator's terms.
	ReasonCode string `json:"reasonCode,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Candidates are the devices its waiting requests could take, in the
	// order the allocator tries their alternatives, each with what keeps
	// it from the pod; FreePerNode counts each alternative's free devices
	// by node (a claim's devices come from one node).
	Candidates  []allocation.Candidate    `json:"candidates,omitempty"`
	FreePerNode map[string]map[string]int `json:"freePerNode,omitempty"`
	// Verdict is the allocator's answer on every node for the claims the
	// pod still needs: where they fit, the allocator's errors, and what
	// outside DRA keeps the pod off each node.
	Verdict *allocation.Verdict `json:"verdict,omitempty"`
}

// PodDevice is a device a pod's claim was allocated.
type PodDevice struct {
	Claim      string `json:"claim"`
	Request    string `json:"request"`
	Subrequest string `json:"subrequest,omitempty"`
	Node       string `json:"node,omitempty"`
	Device     string `json:"device"`
}

func (r *reader) why(ctx context.Context, target string) error {
	kind, name, ok := strings.Cut(target, "/")
	if !ok {
		kind, name = "pod", target
	}
	s, err := r.snapshot(ctx)
	if err != nil {
		return err
	}
	var e *Explanation
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		e, err = r.whyPod(ctx, s, name)
	case "claim", "claims", "resourceclaim", "resourceclaims":
		e, err = r.whyClaim(ctx, s, name)
	case "podgroup", "podgroups":
		e, err = r.whyGroup(ctx, s, name)
	default:
		return fmt.Errorf("why %s: unknown kind %q: want a pod (NAME or pod/NAME), claim/NAME or podgroup/NAME", target, kind)
	}
	if err != nil {
		return err
	}
	return r.print(e, func(w io.Writer) { writeExplanation(w, e, r.output == "wide") })
}

func (r *reader) whyPod(ctx context.Context, s *allocation.Snapshot, name string) (*Explanation, error) {
	var found []*v1.Pod
	var names []string
	for i := range s.Pods {
		p := &s.Pods[i]
		names = append(names, p.Name)
		if p.Name == name {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return nil, notFound("pod", name, r.where(), names)
	case 1:
	default:
		var where []string
		for _, p := range found {
			where = append(where, p.Namespace)
		}
		return nil, fmt.Errorf("pod %q is in several namespaces (%s): name one with -n", name, strings.Join(where, ", "))
	}
	pe, err := explainPod(ctx, s, found[0])
	if err != nil {
		return nil, err
	}
	return &Explanation{Kind: "Pod", Namespace: found[0].Namespace, Name: name, Pods: []PodExplanation{*pe}}, nil
}

func (r *reader) whyClaim(ctx context.Context, s *allocation.Snapshot, name string) (*Explanation, error) {
	var row *allocation.ClaimRow
	var names []string
	rows := s.ClaimRows()
	for i := range rows {
		names = append(names, rows[i].Name)
		if rows[i].Name == name {
			if row != nil {
				return nil, fmt.Errorf("claim %q is in several namespaces (%s, %s): name one with -n", name, row.Namespace, rows[i].Namespace)
			}
			row = &rows[i]
		}
	}
	if row == nil {
		return nil, notFound("claim", name, r.where(), names)
	}
	e := &Explanation{Kind: "ResourceClaim", Namespace: row.Namespace, Name: name, Claim: row}
	for i := range s.Pods {
		p := &s.Pods[i]
		if p.Namespace != row.Namespace || !slices.Contains(allocation.ClaimNames(p), name) {
			continue
		}
		pe, err := explainPod(ctx, s, p)
		if err != nil {
			return nil, err
		}
		e.Pods = append(e.Pods, *pe)
	}
	if len(e.Pods) == 0 && row.State == "pending" {
		e.Message = "no pod uses the claim: a claim is allocated when the scheduler places the first pod that uses it"
	}
	return e, nil
}

func (r *reader) whyGroup(ctx context.Context, s *allocation.Snapshot, name string) (*Explanation, error) {
	namespaces := map[string]bool{}
	var names []string
	for i := range s.Pods {
		if g := allocation.GroupOf(&s.Pods[i]); g != "" {
			names = append(names, g)
			if g == name {
				namespaces[s.Pods[i].Namespace] = true
			}
		}
	}
	for k := range s.PodGroups {
		ns, n, _ := strings.Cut(k, "/")
		names = append(names, n)
		if n == name {
			namespaces[ns] = true
		}
	}
	switch len(namespaces) {
	case 0:
		return nil, notFound("podgroup", name, r.where(), names)
	case 1:
	default:
		return nil, fmt.Errorf("podgroup %q is in several namespaces (%s): name one with -n", name, strings.Join(slices.Sorted(maps.Keys(namespaces)), ", "))
	}
	var namespace string
	for ns := range namespaces {
		namespace = ns
	}
	e := &Explanation{Kind: "PodGroup", Namespace: namespace, Name: name}
	for _, p := range s.GroupMembers(namespace, name) {
		pe, err := explainPod(ctx, s, p)
		if err != nil {
			return nil, err
		}
		e.Pods = append(e.Pods, *pe)
	}
	if len(e.Pods) == 0 {
		e.Message = "the PodGroup has no pods yet"
	}
	return e, nil
}

// explainPod is a pod's allocation, or why it waits and what each device
// its requests could take is held by.
func explainPod(ctx context.Context, s *allocation.Snapshot, pod *v1.Pod) (*PodExplanation, error) {
	rows, err := s.PodRows(ctx, pod)
	if err != nil {
		return nil, err
	}
	pe := &PodExplanation{Namespace: pod.Namespace, Name: pod.Name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName}
	for _, row := range rows {
		if row.Device != "" {
			pe.Allocated = append(pe.Allocated, PodDevice{Claim: row.Claim, Request: row.Request, Subrequest: row.Subrequest, Device: row.DeviceRef()})
		}
		if row.ReasonCode != "" || row.Reason != "" {
			pe.ReasonCode, pe.Reason = row.ReasonCode, row.Reason
		}
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		for i := range pe.Allocated {
			pe.Allocated[i].Node = pod.Spec.NodeName
		}
		return pe, nil
	}
	cands, err := s.Candidates(ctx, pod)
	if errors.Is(err, allocation.ErrNoPendingClaims) {
		return pe, nil
	}
	if err != nil {
		return nil, err
	}
	pe.Candidates = cands
	pe.FreePerNode = allocation.FreePerNode(cands)
	if len(s.Nodes) > 0 {
		if pe.Verdict, err = s.Verdict(ctx, pod); err != nil {
			return nil, err
		}
	}
	return pe, nil
}

// notFound names what was searched and the names nearest to the one
// asked.
func notFound(kind, name, where string, names []string) error {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	msg := fmt.Sprintf("%s %q not found %s", kind, name, where)
	if near := nearest.Name(name, names); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	switch {
	case len(names) == 0:
		msg += fmt.Sprintf(" (there is no %s there)", kind)
	case len(names) <= 8:
		msg += fmt.Sprintf(" (%ss there: %s)", kind, strings.Join(names, ", "))
	default:
		msg += fmt.Sprintf(" (%d %ss there, e.g. %s)", len(names), kind, strings.Join(names[:8], ", "))
	}
	return errors.New(msg)
}

func (r *reader) devices(ctx context.Context, node string) error {
	s, err := r.snapshot(ctx)
	if err != nil {
		return err
	}
	rows, err := s.DeviceRows(ctx)
	if err != nil {
		return err
	}
	if node != "" {
		var nodes []string
		rows = slices.DeleteFunc(rows, func(d allocation.DeviceRow) bool {
			nodes = append(nodes, d.Node)
			return d.Node != node
		})
		if len(rows) == 0 {
			return notFound("node with devices", node, "", nodes)
		}
	}
	return r.print(rows, func(w io.Writer) { writeDevices(w, rows, r.output == "wide") })
}

func (r *reader) claims(ctx context.Context) error {
	s, err := r.snapshot(ctx)
	if err != nil {
		return err
	}
	rows := s.ClaimRows()
	return r.print(rows, func(w io.Writer) { writeClaims(w, rows, r.output == "wide") })
}

// print writes v as JSON or YAML, or as text through table.
func (r *reader) print(v any, table func(io.Writer)) error {
	switch r.output {
	case "json":
		enc := json.NewEncoder(r.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = r.stdout.Write(data)
		return err
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 8, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}
